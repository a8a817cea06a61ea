#!/usr/bin/env python3
"""Checks where a run's newcomers went, by label set (BENCHMARKS.md §6).

Usage: python3 scripts/newcomer-check.py RUN_DIR PARTITION_JSON
  RUN_DIR: a `coordinator simulate --newcomers N` output (summary.json);
  PARTITION_JSON: `coordinator partition --partition P --clients C --seed S` of the same run.
A newcomer counts as placed right when every round-0 member of its cluster holds exactly its set
of labels (the partition's own ground truth for label:K, where the FedClust cut finds one cluster
per label set). Prints one line per newcomer placed elsewhere, then the counts.
"""
import json
import sys

summary = json.load(open(f"{sys.argv[1]}/summary.json"))
clients = json.load(open(sys.argv[2]))["clients"]
labels = {c["index"]: frozenset(c["labels"]) for c in clients}
newcomers = summary["newcomers"]
assignment = summary["assignment"]
# `assignment` is by position: the round-0 clients (pool index = position) come first.
round_zero = len(assignment) - len(newcomers)
right = 0
unheld = shares = 0
for n in newcomers:
    mine = labels[n["client"]]
    members = {labels[p] for p in range(round_zero) if assignment[p] == n["cluster"]}
    held = any(labels[p] == mine for p in range(round_zero))
    if members == {mine}:
        right += 1
    if not held:
        unheld += 1
        shares += all(m & mine for m in members)
    else:
        print(f"newcomer {n['client']} {sorted(mine)} -> cluster {n['cluster']} holding "
              f"{[sorted(m) for m in members]}; a round-0 client with its labels exists: {held}")
print(f"{right}/{len(newcomers)} newcomers joined a cluster whose round-0 members all hold exactly "
      f"their label set; {len(summary['dropped_newcomers'])} dropped")
print(f"{unheld} newcomers hold a label set no round-0 client holds; {shares} of them joined a "
      f"cluster whose members all share a label with them")
