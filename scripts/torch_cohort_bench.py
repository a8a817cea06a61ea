#!/usr/bin/env python3
"""PyTorch peer of `coordinator bench`: C LeNet-5 clients (NIID-Bench SimpleCNNMNIST, the
model of `edgecfl_shared::model`) trained at once, each on its own mini-batch of B samples with
its own SGD-with-momentum step (lr 0.01, momentum 0.5), parameters stacked on a client axis and
`torch.func.vmap(grad(loss))` over (params, x[C,B,1,28,28], y[C,B]) (--clients 1 too: a vmap over
one client). With --plain, one model in the plain training loop instead (`nn.Module`, autograd's
`backward`, `torch.optim.SGD` with the same lr and momentum), at each batch of --batch (comma-
separated). Batches are random and stay on the device (the peer's best case). Prints one JSON
line per setting: {"mode", "device", "clients", "batch", "samples_per_second", "runs"}.

    python3 scripts/torch_cohort_bench.py --device cuda --clients 1,10,100 --batch 10
    python3 scripts/torch_cohort_bench.py --device cuda --plain --batch 256,1000
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


class LeNet5(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, 6, 5)
        self.conv2 = torch.nn.Conv2d(6, 16, 5)
        self.fc1 = torch.nn.Linear(256, 120)
        self.fc2 = torch.nn.Linear(120, 84)
        self.fc3 = torch.nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = x.flatten(1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--clients", default="1,10,100")
    ap.add_argument("--batch", default="10", help="batch size (comma-separated with --plain)")
    ap.add_argument("--plain", action="store_true", help="one model, the plain training loop")
    ap.add_argument("--steps", type=int, default=60, help="timed steps per repeat")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    dev = torch.device(args.device)
    torch.manual_seed(0)
    model = LeNet5().to(dev)
    names = [n for n, _ in model.named_parameters()]

    def loss(params, x, y):
        out = functional_call(model, dict(zip(names, params)), (x,))
        return F.cross_entropy(out, y)

    if args.plain:
        for b in [int(v) for v in args.batch.split(",")]:
            plain(model, dev, b, args.steps, args.repeats)
        return
    args.batch = int(args.batch)
    step_grad = vmap(grad(loss))
    for c in [int(v) for v in args.clients.split(",")]:
        params = [p.detach().unsqueeze(0).repeat(c, *([1] * p.dim())).clone() for p in model.parameters()]
        vel = [torch.zeros_like(p) for p in params]
        x = torch.rand(c, args.batch, 1, 28, 28, device=dev)
        y = torch.randint(0, 10, (c, args.batch), device=dev)

        def step():
            gs = step_grad(params, x, y)
            with torch.no_grad():
                for p, v, g in zip(params, vel, gs):
                    v.mul_(0.5).add_(g)
                    p.sub_(v, alpha=0.01)

        measure("torch-vmap-eager", step, dev, c, args.batch, args.steps, args.repeats)


def plain(model, dev, batch, steps, repeats):
    """One model at `batch`, the loop a PyTorch user writes; prints its JSON line."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    x = torch.rand(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(model(x), y).backward()
        opt.step()

    measure("torch-eager", step, dev, 1, batch, steps, repeats)


def measure(mode, step, dev, clients, batch, steps, repeats):
    """Runs `step` 5 times untimed, then `repeats` times `steps` times; prints the JSON line
    (the median of the repeats' samples/s)."""
    for _ in range(5):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    runs = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        runs.append(steps * clients * batch / (time.perf_counter() - t))
    print(json.dumps({
        "mode": mode,
        "device": str(dev),
        "torch": torch.__version__,
        "clients": clients,
        "batch": batch,
        "samples_per_second": sorted(runs)[len(runs) // 2],
        "runs": runs,
    }), flush=True)


if __name__ == "__main__":
    main()
