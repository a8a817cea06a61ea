#!/usr/bin/env python3
"""Local training throughput: the edge client beside PyTorch, same model, data and threads, one run.

    TORCH_PY=/path/to/venv/bin/python3 python3 scripts/bench-throughput.py
    python3 scripts/bench-throughput.py --threads 1,2 --batches 10,64 --samples 3000 --out DIR
    python3 scripts/bench-throughput.py --client target/aarch64-unknown-linux-gnu/release/edge-client \
        --runner "qemu-aarch64 -L /usr/aarch64-linux-gnu" --no-torch --samples 600 \
        --baseline target/before/aarch64-unknown-linux-gnu/release/edge-client

For each thread count and model (LeNet-5, MT-HFL's MLP; `--dataset cifar10 --models lenet5-rgb`
for the colour LeNet-5 on CIFAR-10) it runs `edge-client bench --threads t`
(each batch split over t threads; RAYON_NUM_THREADS=t too, and no --threads for a binary from
before that flag), then a PyTorch script of the same
training step in a fresh process with torch.set_num_threads(t) and set_num_interop_threads(1),
right after it (and, with --baseline, another edge-client binary, e.g. one built from an
earlier commit, right before it). All train one epoch over the first `--samples` training images
(pixels / 255, no other normalisation), shuffled, with plain SGD, learning rate 0.01, momentum
0.5, mean cross-entropy; each reports the median samples/s of `--repeats` epochs after one
untimed warm-up epoch. With `--rounds R` the sides take turns R times: each side's figure is its
median over the rounds, each ratio the median over the rounds of that round's ratio. The batch tensors are built from the raw bytes inside the timed loop on
both sides, as the edge client does. Writes OUT/throughput.json (raw) and OUT/throughput.md (the
table of BENCHMARKS.md §3 with the ratio edgecfl / PyTorch). Time it on an idle machine: the load
average is printed before and after.

PyTorch picks its CPU kernels by the CPU (AVX-512 where there is one); `ATEN_CPU_CAPABILITY=avx2
DNNL_MAX_CPU_ISA=AVX2` in the environment caps it at AVX2 (the JSON records the `torch_isa` it
ran with, and the CPU).

PyTorch is a benchmark tool here, not a dependency: install it into a throwaway venv
(`python3 -m venv target/torch-venv && target/torch-venv/bin/pip install torch==2.9.0`) and point TORCH_PY
(or --torch-python) at that interpreter.
"""

import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The PyTorch side, run as `python -c TORCH_SCRIPT threads model batches samples repeats data_dir`.
TORCH_SCRIPT = r"""
import gzip, json, statistics, sys, time
from pathlib import Path
import torch
import torch.nn as nn

threads, model_name = int(sys.argv[1]), sys.argv[2]
batches = [int(b) for b in sys.argv[3].split(",")]
samples, repeats, data_dir = int(sys.argv[4]), int(sys.argv[5]), Path(sys.argv[6])
dataset = sys.argv[7]
torch.set_num_threads(threads)
torch.set_num_interop_threads(1)
torch.manual_seed(0)

def idx(name):
    p = data_dir / name
    raw = gzip.open(p).read() if p.suffix == ".gz" else p.read_bytes()
    return raw

if dataset == "cifar10":
    # The image folder as the edge client reads it: class folders, then files, in name order;
    # each JPEG decoded to RGB, channel after channel.
    from PIL import Image
    files = [f for c in sorted((data_dir / "train").iterdir()) for f in sorted(c.iterdir())][:samples]
    classes = sorted(c.name for c in (data_dir / "train").iterdir())
    pixels = torch.stack([torch.frombuffer(bytearray(Image.open(f).convert("RGB").tobytes()),
                                           dtype=torch.uint8).view(32, 32, 3).permute(2, 0, 1)
                          for f in files]).contiguous()
    labels = torch.tensor([classes.index(f.parent.name) for f in files])
else:
    img = idx("train-images-idx3-ubyte.gz")
    lab = idx("train-labels-idx1-ubyte.gz")
    pixels = torch.frombuffer(bytearray(img[16:16 + samples * 784]), dtype=torch.uint8).view(samples, 1, 28, 28)
    labels = torch.frombuffer(bytearray(lab[8:8 + samples]), dtype=torch.uint8).long()

class LeNet5(nn.Module):
    # conv C->6 k5, ReLU, maxpool 2, conv 6->16 k5, ReLU, maxpool 2, fc F->120->84->10 (C, F: 1,
    # 256 for 1x28x28 images; 3, 400 for 3x32x32, NIID-Bench's SimpleCNN)
    def __init__(self, channels=1, features=256):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(channels, 6, 5), nn.Conv2d(6, 16, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.fc1, self.fc2, self.fc3 = nn.Linear(features, 120), nn.Linear(120, 84), nn.Linear(84, 10)
    def forward(self, x):
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        x = x.flatten(1)
        return self.fc3(torch.relu(self.fc2(torch.relu(self.fc1(x)))))

class Mlp(nn.Module):
    # fc 784->32 ReLU, 32->10 (MT-HFL's FMNIST model)
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(784, 32), nn.Linear(32, 10)
    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))

def epoch(net, opt, loss_fn, batch):
    order = torch.randperm(samples)
    for start in range(0, samples, batch):
        i = order[start:start + batch]
        x = pixels[i].float() / 255.0
        y = labels[i]
        loss = loss_fn(net(x), y)
        loss.item()  # the edge client reads each batch's loss too
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

out = []
for batch in batches:
    net = {"lenet5": LeNet5, "lenet5-rgb": lambda: LeNet5(3, 400), "mlp": Mlp}[model_name]()
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.5)
    loss_fn = nn.CrossEntropyLoss()
    epoch(net, opt, loss_fn, batch)  # untimed warm-up
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        epoch(net, opt, loss_fn, batch)
        runs.append(samples / (time.perf_counter() - t))
    out.append({"batch": batch, "samples_per_second": statistics.median(runs), "runs": runs})
print(json.dumps({"torch": torch.__version__, "isa": torch.backends.cpu.get_cpu_capability(),
                  "results": out}))
"""


def cpu_model() -> str:
    """The CPU's model name and whether it has AVX-512 (Linux's /proc/cpuinfo; '' elsewhere)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return ""
    name = next((l.split(":", 1)[1].strip() for l in info.splitlines() if l.startswith("model name")), "")
    return f"{name}, {'with' if ' avx512f' in info else 'without'} AVX-512"


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def paired(ours, theirs) -> float:
    """The median over rounds of ours / theirs in the same round."""
    return statistics.median(a / b for a, b in zip(ours, theirs))


def rel(v) -> str:
    """An argument as recorded: paths inside the checkout relative to it, others by their file
    name only (a machine's own directories mean nothing elsewhere)."""
    if isinstance(v, Path) and v.resolve().is_relative_to(ROOT):
        return str(v.resolve().relative_to(ROOT))
    if isinstance(v, Path) and v.is_absolute():
        return f"{v.name} (outside the checkout)"
    return str(v)


def takes_threads(args, client) -> bool:
    """Whether this edge-client's bench has --threads (binaries before it trained on one thread)."""
    cmd = shlex.split(args.runner) if args.runner else []
    res = subprocess.run(cmd + [str(client), "bench", "--help"], capture_output=True, text=True)
    return "--threads" in res.stdout


def run_client(args, threads, model, client=None):
    client = client or args.client
    cmd = shlex.split(args.runner) if args.runner else []
    cmd += [str(client), "bench", "--model", model, "--batches", args.batches,
            "--samples", str(args.samples), "--repeats", str(args.repeats),
            "--dataset", args.dataset, "--data", str(args.data)]
    if takes_threads(args, client):
        cmd += ["--threads", str(threads)]
    env = dict(os.environ, RAYON_NUM_THREADS=str(threads))
    res = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True)
    return json.loads(res.stdout)


def run_torch(args, threads, model):
    res = subprocess.run(
        [args.torch_python, "-c", TORCH_SCRIPT, str(threads), model, args.batches,
         str(args.samples), str(args.repeats), str(args.data), args.dataset],
        check=True, capture_output=True, text=True,
        env=dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads)))
    return json.loads(res.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--client", type=Path, default=ROOT / "target/release/edge-client",
                   help="edge-client binary (default: target/release/edge-client; build it with "
                        "`cargo build --release -p edge-client`)")
    p.add_argument("--baseline", type=Path, help="a second edge-client binary timed the same way (column 'baseline')")
    p.add_argument("--runner", default="", help="prefix for the client, e.g. 'qemu-aarch64 -L /usr/aarch64-linux-gnu'")
    p.add_argument("--torch-python", default=os.environ.get("TORCH_PY", sys.executable))
    p.add_argument("--no-torch", action="store_true", help="time only the edge client")
    p.add_argument("--dataset", default="fmnist", choices=["fmnist", "cifar10"],
                   help="fmnist (IDX files in --data) or cifar10 (its image folder in --data, e.g. "
                        "../shared/data/cifar10-jpg's tarball extracted; the PyTorch side decodes "
                        "it with PIL, `pip install pillow` beside torch)")
    p.add_argument("--data", type=Path, default=Path("/usr/share/datasets/fashion-mnist"))
    p.add_argument("--threads", default="1,2")
    p.add_argument("--models", default="lenet5,mlp")
    p.add_argument("--batches", default="10,64")
    p.add_argument("--samples", type=int, default=3000)
    p.add_argument("--repeats", type=int, default=5, help="timed epochs per run (their median is the run's figure)")
    p.add_argument("--rounds", type=int, default=1, help="runs of each side, alternating (median over rounds)")
    p.add_argument("--out", type=Path, default=ROOT / "bench-results/throughput")
    args = p.parse_args()
    if not args.client.exists():
        sys.exit(f"no edge client at {args.client}: cargo build --release -p edge-client")
    args.out.mkdir(parents=True, exist_ok=True)
    print(f"load average before: {load()}", flush=True)
    raw = {"host": platform.machine(), "cpu": cpu_model(), "cpu_count": os.cpu_count(),
           "load_before": load(), "args": {k: rel(v) for k, v in vars(args).items()}}
    # The interpreter by name only: its absolute path names the measuring machine (and means
    # nothing with --no-torch); tests/committed_files.rs refuses machine paths in results.
    raw["args"]["torch_python"] = ("(not run)" if args.no_torch
                                   else os.path.basename(str(args.torch_python)))
    # Every round times each side once per setting, one right after the other, so a machine whose
    # speed drifts (a shared VM) slows both sides of a ratio alike. The table gives each side's
    # median over the rounds and, as the ratio, the median over the rounds of that round's ratio
    # (the two runs taken one right after the other).
    runs = {}  # (threads, model, batch, side) -> [samples/s of each round]
    torch_version = torch_isa = None
    for rnd in range(args.rounds):
        for threads in [int(t) for t in args.threads.split(",")]:
            for model in args.models.split(","):
                sides = [("baseline", lambda: run_client(args, threads, model, args.baseline))] if args.baseline else []
                sides.append(("edgecfl", lambda: run_client(args, threads, model)))
                if not args.no_torch:
                    sides.append(("torch", lambda: run_torch(args, threads, model)))
                for side, timed in sides:
                    got = timed()
                    if side == "torch":
                        torch_version, torch_isa = got["torch"], got.get("isa")
                        got = got["results"]
                    for r in got:
                        runs.setdefault((threads, model, r["batch"], side), []).append(r["samples_per_second"])
                print(f"round {rnd + 1}/{args.rounds}, {threads} thread(s), {model}: " + ", ".join(
                    f"{side} {runs[(threads, model, b, side)][-1]:.0f}"
                    for b in sorted({k[2] for k in runs if k[:2] == (threads, model)})
                    for side, _ in sides), flush=True)
    rows = []
    for (threads, model, batch, side) in runs:
        if side != "edgecfl":
            continue
        key = (threads, model, batch)
        row = {"threads": threads, "model": model, "batch": batch,
               "edgecfl": statistics.median(runs[key + ("edgecfl",)]), "edgecfl_runs": runs[key + ("edgecfl",)]}
        if key + ("baseline",) in runs:
            b = runs[key + ("baseline",)]
            row.update(baseline=statistics.median(b), baseline_runs=b,
                       speedup=paired(runs[key + ("edgecfl",)], b))
        if key + ("torch",) in runs:
            t = runs[key + ("torch",)]
            row.update(torch=statistics.median(t), torch_runs=t, torch_version=torch_version,
                       torch_isa=torch_isa, ratio=paired(runs[key + ("edgecfl",)], t))
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("_runs")}), flush=True)
    raw["load_after"] = load()
    raw["rows"] = rows
    print(f"load average after: {raw['load_after']}", flush=True)
    (args.out / "throughput.json").write_text(json.dumps(raw, indent=1) + "\n")
    lines = ["| threads | model | batch | baseline samples/s | edgecfl samples/s | edgecfl / baseline "
             "| PyTorch samples/s | edgecfl / PyTorch |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    cell = lambda r, k, f: format(r[k], f) if k in r else "-"
    for r in rows:
        lines.append(f"| {r['threads']} | {r['model']} | {r['batch']} | {cell(r, 'baseline', '.0f')} "
                     f"| {r['edgecfl']:.0f} | {cell(r, 'speedup', '.2f')} | {cell(r, 'torch', '.0f')} "
                     f"| {cell(r, 'ratio', '.2f')} |")
    (args.out / "throughput.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
