#!/usr/bin/env python3
"""Independent check of a model file written by edgecfl (`cluster-<k>.safetensors`).

Loads the file with the `safetensors` package (numpy flavour), checks that its tensors have the
names, shapes and dtype of the PyTorch modules (NIID-Bench's SimpleCNNMNIST and SimpleCNN for
the two LeNet-5s, the 784-32-10 MLP, AdaCFL's MnistCNN, CifarCNN and FmnistCNN, the DAWNBench
ResNet-9 with GroupNorm(32)), runs the module's forward pass written out in numpy (float64:
Conv2d as cross-correlation, zero-padded as the module says, ReLU, MaxPool2d(2, 2), GroupNorm as
PyTorch's F.group_norm (biased variance, eps 1e-5), residual sums, flatten in C,H,W order, Linear
as x @ W.T + b), and
compares its logits with the ones edgecfl's own forward pass printed (`edge-client predict
--json`) for the same images.

Only `safetensors` and `numpy` (and the standard library): no PyTorch, no edgecfl code.

usage: check_safetensors.py MODEL.safetensors PREDICT.json IMAGES [--tol 1e-4]
IMAGES: an IDX image file (plain or .gz) or a CIFAR-10 binary batch (`*.bin`, records of a
label byte and 3 x 32 x 32 image bytes).
Exit status 0 when every logit agrees within the tolerance; prints one summary line.
"""

import argparse
import gzip
import json
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

# The PyTorch modules: (first convolution's padding, convolutions [out, in], linear layers
# [(name, in, out)]); every convolution is 5 x 5, followed by ReLU and 2 x 2 max-pooling, every
# linear layer but the last by ReLU.
ARCH = {
    "lenet5": (0, [(6, 1), (16, 6)], [("fc1", 256, 120), ("fc2", 120, 84), ("fc3", 84, 10)]),
    "lenet5-rgb": (0, [(6, 3), (16, 6)], [("fc1", 400, 120), ("fc2", 120, 84), ("fc3", 84, 10)]),
    "mlp": (0, [], [("fc1", 784, 32), ("fc2", 32, 10)]),
    "mnist-cnn": (0, [(20, 1), (50, 20)], [("fc", 800, 10)]),
    "cifar-cnn": (0, [(6, 3), (16, 6)], [("fc", 400, 10)]),
    "fmnist-cnn": (2, [(16, 1), (32, 16)], [("fc", 800, 10)]),
}


# ResNet-9 (GroupNorm): blocks (name, in, out, pooled) of Conv2d(in, out, 3, padding=1),
# GroupNorm(32, out), ReLU[, MaxPool2d(2)]; res1 and res2 add their two blocks' output to their
# input; then MaxPool2d(4), flatten, fc = Linear(512, 10).
RESNET9 = [
    ("conv1", 3, 64, False), ("conv2", 64, 128, True),
    ("res1.0", 128, 128, False), ("res1.1", 128, 128, False),
    ("conv3", 128, 256, True), ("conv4", 256, 512, True),
    ("res2.0", 512, 512, False), ("res2.1", 512, 512, False),
]
MODELS = sorted(ARCH) + ["resnet9"]


def shapes(model):
    """name -> shape in the torch layout (Linear weight = [out, in])."""
    if model == "resnet9":
        out = {}
        for name, c_in, c_out, _ in RESNET9:
            out[f"{name}.0.weight"] = (c_out, c_in, 3, 3)
            for t in ["0.bias", "1.weight", "1.bias"]:
                out[f"{name}.{t}"] = (c_out,)
        out["fc.weight"], out["fc.bias"] = (10, 512), (10,)
        return out
    _, convs, fcs = ARCH[model]
    out = {}
    for i, (o, c) in enumerate(convs, 1):
        out[f"conv{i}.weight"] = (o, c, 5, 5)
        out[f"conv{i}.bias"] = (o,)
    for name, d_in, d_out in fcs:
        out[f"{name}.weight"] = (d_out, d_in)
        out[f"{name}.bias"] = (d_out,)
    return out


def read_images(path):
    if path.endswith(".bin"):
        with open(path, "rb") as f:
            data = f.read()
        if len(data) % 3073:
            raise SystemExit(f"{path}: not a CIFAR-10 binary batch ({len(data)} bytes)")
        records = np.frombuffer(data, dtype=np.uint8).reshape(-1, 3073)
        return records[:, 1:].reshape(-1, 3, 32, 32)
    return read_idx_images(path)


def read_idx_images(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", data[:16])
    if magic != 0x00000803:
        raise SystemExit(f"{path}: not an IDX image file (magic {magic:#x})")
    return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, 1, rows, cols)


def conv2d(x, w, b, pad=0):
    """PyTorch Conv2d, stride 1, zero padding `pad`: out[n,o,i,j] = b[o] + sum_{c,u,v} w[o,c,u,v] x[n,c,i+u,j+v]."""
    k = w.shape[2]
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))  # n,c,H',W',k,k
    out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3]))  # n,H',W',o
    return out.transpose(0, 3, 1, 2) + b[None, :, None, None]


def maxpool2(x, k=2):
    n, c, h, w = x.shape
    h2, w2 = h // k, w // k
    return x[:, :, : k * h2, : k * w2].reshape(n, c, h2, k, w2, k).max(axis=(3, 5))


def group_norm(x, gamma, beta, groups=32, eps=1e-5):
    """PyTorch's F.group_norm: each sample's groups of consecutive channels normalised by their
    mean and biased variance, then each channel scaled and shifted."""
    n, c, h, w = x.shape
    g = x.reshape(n, groups, -1)
    g = (g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + eps)
    return g.reshape(n, c, h, w) * gamma[None, :, None, None] + beta[None, :, None, None]


def resnet9(t, x, groups=32):
    def block(name, x, pooled):
        y = conv2d(x, t[f"{name}.0.weight"], t[f"{name}.0.bias"], 1)
        y = relu(group_norm(y, t[f"{name}.1.weight"], t[f"{name}.1.bias"], groups or y.shape[1]))
        return maxpool2(y) if pooled else y

    blocks = {name: pooled for name, _, _, pooled in RESNET9}
    run = lambda name, x: block(name, x, blocks[name])  # noqa: E731
    x = run("conv2", run("conv1", x))
    x = run("res1.1", run("res1.0", x)) + x
    x = run("conv4", run("conv3", x))
    x = run("res2.1", run("res2.0", x)) + x
    x = maxpool2(x, 4).reshape(x.shape[0], -1)
    return linear(x, t["fc.weight"], t["fc.bias"])


def relu(x):
    return np.maximum(x, 0.0)


def linear(x, w, b):
    return x @ w.T + b


def forward(model, t, x):
    if model == "resnet9":
        return resnet9(t, x)
    pad, convs, fcs = ARCH[model]
    for i in range(1, len(convs) + 1):
        x = maxpool2(relu(conv2d(x, t[f"conv{i}.weight"], t[f"conv{i}.bias"], pad if i == 1 else 0)))
    x = x.reshape(x.shape[0], -1)
    for k, (name, _, _) in enumerate(fcs):
        x = linear(x, t[f"{name}.weight"], t[f"{name}.bias"])
        if k + 1 < len(fcs):
            x = relu(x)
    return x


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("predictions")
    ap.add_argument("images")
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()

    with safe_open(a.model, framework="numpy") as f:
        meta = f.metadata() or {}
    tensors = load_file(a.model)
    model = meta.get("model")
    if model not in MODELS:
        raise SystemExit(f"{a.model}: header model {model!r} is not one of {MODELS}")
    want = shapes(model)
    if set(tensors) != set(want):
        raise SystemExit(f"tensor names {sorted(tensors)} != {sorted(want)}")
    for name, shape in want.items():
        t = tensors[name]
        if t.dtype != np.float32 or t.shape != shape:
            raise SystemExit(f"{name}: {t.dtype} {t.shape}, PyTorch needs float32 {shape}")
    for key in ["format", "architecture", "method", "cluster", "members", "round",
                "input_scale", "input_mean", "input_std"]:
        if key not in meta:
            raise SystemExit(f"header lacks {key!r}: {meta}")
    if meta["format"] != "pt" or meta["input_scale"] != "1/255":
        raise SystemExit(f"header: {meta}")
    members = json.loads(meta["members"])
    if not isinstance(members, list) or not members:
        raise SystemExit(f"header members: {meta['members']!r}")

    with open(a.predictions) as f:
        pred = json.load(f)
    ours = np.array([p["logits"] for p in pred["predictions"]], dtype=np.float64)
    n = ours.shape[0]
    if n == 0:
        raise SystemExit("no predictions to compare")

    mean, std = float(meta["input_mean"]), float(meta["input_std"])
    images = read_images(a.images)[:n]
    x = (images.astype(np.float32) / np.float32(255.0) - mean) / std
    t64 = {k: v.astype(np.float64) for k, v in tensors.items()}
    theirs = forward(model, t64, x.astype(np.float64))

    diff = np.abs(theirs - ours)
    worst = float(diff.max())
    same_class = int((theirs.argmax(axis=1) == np.array([p["predicted"] for p in pred["predictions"]])).sum())
    print(
        f"check_safetensors: {model} cluster {meta['cluster']} ({len(members)} members, round {meta['round']}): "
        f"{n} images, max |logit difference| {worst:.3g} (tolerance {a.tol:g}), "
        f"largest |logit| {float(np.abs(theirs).max()):.3g}, same class {same_class}/{n}"
    )
    if not worst <= a.tol:
        i = int(diff.max(axis=1).argmax())
        print(f"image {i}: numpy {theirs[i].tolist()}\n  edgecfl {ours[i].tolist()}", file=sys.stderr)
        return 1
    # Negative controls: the comparison tells the right layout from plausible wrong ones (a
    # linear weight's bytes in burn's [in, out] order read as PyTorch's [out, in]; a flipped
    # convolution kernel, i.e. true convolution instead of PyTorch's cross-correlation).
    x64 = x.astype(np.float64)
    controls = {}
    first_fc = "fc.weight" if model == "resnet9" else ARCH[model][2][0][0] + ".weight"
    w = t64[first_fc]
    transposed = dict(t64, **{first_fc: w.T.reshape(w.shape)})
    controls[f"{first_fc} in burn's [in, out] order"] = lambda: forward(model, transposed, x64)
    conv1 = "conv1.0.weight" if model == "resnet9" else "conv1.weight"
    if conv1 in t64:
        flipped = dict(t64, **{conv1: t64[conv1][:, :, ::-1, ::-1]})
        controls["conv1 kernel flipped"] = lambda: forward(model, flipped, x64)
    if model == "resnet9":
        # Statistics per channel (InstanceNorm's, groups of one) in place of 32 groups'.
        controls["a norm per channel, not per group"] = lambda: resnet9(t64, x64, groups=None)
    for what, logits in controls.items():
        d = float(np.abs(logits() - ours).max())
        if not d > a.tol:
            print(f"negative control failed: with {what} the logits still agree ({d:.3g})", file=sys.stderr)
            return 1
        print(f"  control: with {what}, max |logit difference| {d:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
