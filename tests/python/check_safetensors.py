#!/usr/bin/env python3
"""Independent check of a model file written by edgecfl (`cluster-<k>.safetensors`).

Loads the file with the `safetensors` package (numpy flavour), checks that its tensors have the
names, shapes and dtype of the PyTorch modules (NIID-Bench's SimpleCNNMNIST for LeNet-5, the
784-32-10 MLP), runs the module's forward pass written out in numpy (float64: Conv2d as
cross-correlation without padding, ReLU, MaxPool2d(2, 2), flatten in C,H,W order, Linear as
x @ W.T + b), and compares its logits with the ones edgecfl's own forward pass printed
(`edge-client predict --json`) for the same images.

Only `safetensors` and `numpy` (and the standard library): no PyTorch, no edgecfl code.

usage: check_safetensors.py MODEL.safetensors PREDICT.json IMAGES_IDX[.gz] [--tol 1e-4]
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

# The PyTorch modules' parameters: name -> shape (torch layout, Linear weight = [out, in]).
SHAPES = {
    "lenet5": {
        "conv1.weight": (6, 1, 5, 5),
        "conv1.bias": (6,),
        "conv2.weight": (16, 6, 5, 5),
        "conv2.bias": (16,),
        "fc1.weight": (120, 256),
        "fc1.bias": (120,),
        "fc2.weight": (84, 120),
        "fc2.bias": (84,),
        "fc3.weight": (10, 84),
        "fc3.bias": (10,),
    },
    "mlp": {
        "fc1.weight": (32, 784),
        "fc1.bias": (32,),
        "fc2.weight": (10, 32),
        "fc2.bias": (10,),
    },
}


def read_idx_images(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic, n, rows, cols = struct.unpack(">IIII", data[:16])
    if magic != 0x00000803:
        raise SystemExit(f"{path}: not an IDX image file (magic {magic:#x})")
    return np.frombuffer(data, dtype=np.uint8, offset=16).reshape(n, 1, rows, cols)


def conv2d(x, w, b):
    """PyTorch Conv2d, stride 1, no padding: out[n,o,i,j] = b[o] + sum_{c,u,v} w[o,c,u,v] x[n,c,i+u,j+v]."""
    k = w.shape[2]
    win = np.lib.stride_tricks.sliding_window_view(x, (k, k), axis=(2, 3))  # n,c,H',W',k,k
    return np.einsum("nchwuv,ocuv->nohw", win, w) + b[None, :, None, None]


def maxpool2(x):
    n, c, h, w = x.shape
    h2, w2 = h // 2, w // 2
    return x[:, :, : 2 * h2, : 2 * w2].reshape(n, c, h2, 2, w2, 2).max(axis=(3, 5))


def relu(x):
    return np.maximum(x, 0.0)


def linear(x, w, b):
    return x @ w.T + b


def forward(model, t, x):
    if model == "lenet5":
        x = maxpool2(relu(conv2d(x, t["conv1.weight"], t["conv1.bias"])))
        x = maxpool2(relu(conv2d(x, t["conv2.weight"], t["conv2.bias"])))
        x = x.reshape(x.shape[0], 16 * 4 * 4)
        x = relu(linear(x, t["fc1.weight"], t["fc1.bias"]))
        x = relu(linear(x, t["fc2.weight"], t["fc2.bias"]))
        return linear(x, t["fc3.weight"], t["fc3.bias"])
    x = x.reshape(x.shape[0], 784)
    x = relu(linear(x, t["fc1.weight"], t["fc1.bias"]))
    return linear(x, t["fc2.weight"], t["fc2.bias"])


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
    if model not in SHAPES:
        raise SystemExit(f"{a.model}: header model {model!r} is not lenet5 or mlp")
    want = SHAPES[model]
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
    images = read_idx_images(a.images)[:n]
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
    controls = {}
    w = t64["fc1.weight"]
    controls["fc1.weight in burn's [in, out] order"] = dict(t64, **{"fc1.weight": w.T.reshape(w.shape)})
    if model == "lenet5":
        controls["conv1 kernel flipped"] = dict(t64, **{"conv1.weight": t64["conv1.weight"][:, :, ::-1, ::-1]})
    for what, wrong in controls.items():
        d = float(np.abs(forward(model, wrong, x.astype(np.float64)) - ours).max())
        if not d > a.tol:
            print(f"negative control failed: with {what} the logits still agree ({d:.3g})", file=sys.stderr)
            return 1
        print(f"  control: with {what}, max |logit difference| {d:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
