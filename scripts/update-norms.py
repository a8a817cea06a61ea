#!/usr/bin/env python3
"""Tabulates bench-results/update-norm (README there): round 1's change norms over their median,
and the updates each default bound dropped (client, round, norm, bound, their ratio)."""
import json
import statistics
import sys
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "bench-results/update-norm")
print("| run | updates | median norm | smallest / median | largest / median |")
print("|---|---|---|---|---|")
for run in sorted(root.glob("round1-*")):
    norms = [d["norm"] for d in json.load(open(run / "summary.json"))["dropped_updates"]]
    m = statistics.median(norms)
    print(f"| {run.name} | {len(norms)} | {m:.3f} | {min(norms) / m:.2f} | {max(norms) / m:.2f} |")
print()
print("| run | bound | final accuracy | dropped (client, round, norm / (bound / M)) |")
print("|---|---|---|---|")
for run in sorted(root.glob("m*/*")):
    s = json.load(open(run / "summary.json"))
    bound = s["max_update_norm"]
    m = float(bound.split(":")[1])
    dropped = ", ".join(
        f"{d['client']} round {d['round']}: {d['norm'] / (d['bound'] / m):.1f}×"
        for d in s["dropped_updates"]
    )
    print(f"| {run.parent.name}/{run.name} | {bound} | {s['final_accuracy']:.4f} | {dropped or 'none'} |")
