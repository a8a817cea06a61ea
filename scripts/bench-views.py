#!/usr/bin/env python3
"""Prints the table of BENCHMARKS.md §11 from bench-results/views/*/summary.json.

Per run: clusters; the mean local test accuracy at round 50 and at the best round, in both views
(labels: every test image of each label a client holds; proportional: weighted as its training
labels); the mean over clients of each client's best accuracy (labels view); newcomers' mean
accuracy after personalising. Usage: python3 scripts/bench-views.py [DIR]
"""
import glob
import json
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "bench-results/views"
pct = lambda x: "–" if x is None else f"{100 * x:.2f}"
print("| run | clusters | labels, round 50 | labels, best round | proportional, round 50 | "
      "proportional, best round | each client's best (labels) | newcomers personalised |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for path in sorted(glob.glob(os.path.join(root, "*", "summary.json"))):
    s = json.load(open(path))
    lab = [a for a in s["accuracy_labels_per_round"] if a is not None]
    pro = [a for a in s["accuracy_proportional_per_round"] if a is not None]
    if s.get("local_test", "labels") != "labels":
        print(f"skipping {path}: client best is in the {s['local_test']} view", file=sys.stderr)
        continue
    print(f"| {os.path.basename(os.path.dirname(path))} | {s['n_clusters']} | {pct(lab[-1])} | "
          f"{pct(max(lab))} | {pct(pro[-1])} | {pct(max(pro))} | "
          f"{pct(s.get('mean_client_best_accuracy'))} | {pct(s.get('newcomers_personalized_accuracy'))} |")
