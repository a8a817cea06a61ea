#!/usr/bin/env python3
"""PyTorch peer of `coordinator bench`: C LeNet-5 clients (NIID-Bench SimpleCNNMNIST, the
model of `edgecfl_shared::model`) trained at once, each on its own mini-batch of B samples with
its own SGD-with-momentum step (lr 0.01, momentum 0.5), parameters stacked on a client axis and
`torch.func.vmap(grad(loss))` over (params, x[C,B,1,28,28], y[C,B]); with --clients 1 the plain
one-model training loop. Batches are random and stay on the device (the peer's best case; our
bench builds its batches from host memory). Prints one JSON line per setting:
{"mode", "device", "clients", "batch", "samples_per_second", "runs"}.

    python3 scripts/torch_cohort_bench.py --device cuda --clients 1,10,100 --batch 10
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
    ap.add_argument("--batch", type=int, default=10)
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

        for _ in range(5):
            step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        runs = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            for _ in range(args.steps):
                step()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            runs.append(args.steps * c * args.batch / (time.perf_counter() - t))
        print(json.dumps({
            "mode": "torch-vmap-eager",
            "device": str(dev),
            "torch": torch.__version__,
            "clients": c,
            "batch": args.batch,
            "samples_per_second": sorted(runs)[len(runs) // 2],
            "runs": runs,
        }), flush=True)


if __name__ == "__main__":
    main()
