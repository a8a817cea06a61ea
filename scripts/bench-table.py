#!/usr/bin/env python3
"""Prints the markdown table of BENCHMARKS.md benchmark 1 from bench-results/fedclust/*/summary.json.

Usage: python3 scripts/bench-table.py
"""
import glob
import json
import os

PAPER = {"label:2": 97.92, "label:3": 95.70, "dir:0.1": 95.51}
rows = {}
for path in sorted(glob.glob("bench-results/fedclust/*/summary.json")):
    s = json.load(open(path))
    acc = [a for a in s["accuracy_per_round"] if a is not None]
    if len(acc) < s["config"]["federation"]["rounds"]:
        continue  # an unfinished run
    alg = s["algorithm"]
    fed = s["config"]["federation"]
    lam = fed.get("lambda", fed.get("threshold"))  # `threshold` before issue 26's rename
    if alg == "fedclust" and lam != "auto":
        alg = f"fedclust λ={lam}"
    rows.setdefault(s["partition"], {})[alg] = (s, acc)

print("| partition | algorithm | clusters | acc. round 10 | acc. round 25 | acc. round 50 | best | paper FedClust (200 rounds) | wall time |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for part in ["label:2", "label:3", "dir:0.1"]:
    order = {"fedclust": 0, "fedavg": 2, "local": 3}
    for alg in sorted(rows.get(part, {}), key=lambda a: (order.get(a, 1), a)):
        s, acc = rows[part][alg]
        at = lambda r: f"{100 * acc[r - 1]:.2f}" if len(acc) >= r else "–"
        paper = f"{PAPER[part]:.2f}" if alg.startswith("fedclust") else ""
        print(f"| {part} | {alg} | {s['n_clusters']} | {at(10)} | {at(25)} | {at(len(acc))} | "
              f"{100 * max(acc):.2f} | {paper} | {s['wall_seconds'] / 60:.1f} min |")
