#!/usr/bin/env python3
"""Tabulates scripts/bench-autocut.sh: for every run, the `auto` (silhouette) cut it made and the
largest-gap cut of the same dendrogram (recomputed here exactly as Dendrogram::auto_threshold and
cut_distance do), each scored by the ARI against the truth. Writes autocut.csv and autocut.md into
the results directory (argument; default bench-results/autocut). Standard library only."""
import collections
import json
import math
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "bench-results/autocut"
runs = os.path.join(root, "runs")


def comb2(x):
    return x * (x - 1) // 2


def ari(a, b):
    """Adjusted Rand index (Hubert & Arabie), with scikit-learn's special cases."""
    n = len(a)
    cells = collections.Counter(zip(a, b))
    rows = collections.Counter(a)
    cols = collections.Counter(b)
    index = sum(comb2(v) for v in cells.values())
    sr = sum(comb2(v) for v in rows.values())
    sc = sum(comb2(v) for v in cols.values())
    total = comb2(n)
    if total == 0:
        return 1.0
    expected = sr * sc / total
    maximum = (sr + sc) / 2
    if maximum == expected:
        return 1.0
    return (index - expected) / (maximum - expected)


def max_heights(n, merges):
    out = []
    for m in merges:
        h = m["height"]
        for c in (m["a"], m["b"]):
            if c >= n:
                h = max(h, out[c - n])
        out.append(h)
    return out


def cut_distance(n, merges, t):
    parent = list(range(n + len(merges)))

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, (m, h) in enumerate(zip(merges, max_heights(n, merges))):
        if h <= t:
            parent[m["a"]] = n + i
            parent[m["b"]] = n + i
    labels, seen = [], {}
    for i in range(n):
        labels.append(seen.setdefault(find(i), len(seen)))
    return labels


def gap_threshold(merges):
    h = sorted(m["height"] for m in merges)
    if not h:
        return 0.0
    if len(h) == 1:
        return h[0]
    best, best_gap = 0, h[1] - h[0]
    for i in range(1, len(h) - 1):
        if h[i + 1] - h[i] > best_gap:
            best, best_gap = i, h[i + 1] - h[i]
    if best_gap <= 0:
        return h[-1]
    lo, hi = h[best], h[best + 1]
    mid = lo + (hi - lo) / 2
    return mid if mid < hi else lo


def level_gaps(n, merges, cands):
    """Width of the gap in (sorted) merge heights above each candidate cut (None for the top)."""
    h = sorted(max_heights(n, merges))
    out = []
    for c in cands:
        k = c["n_clusters"]
        out.append(h[n - k] - h[n - k - 1] if 1 < k < n and n - k < len(h) else None)
    return out


def grouped(n, merges, cand):
    """Mean silhouette over the observations in clusters of two or more (singletons score 0, so
    this is score · n / m, with m such observations)."""
    lab = cut_distance(n, merges, cand["threshold"])
    sizes = collections.Counter(lab)
    m = sum(sizes[x] > 1 for x in lab)
    return cand["score"] * n / m if m else 0.0


def grouped_rule(n, merges, cands, gaps, eps=0.01, min_grouped=0.5):
    """The auto rule of cut.rs: best mean silhouette, near-ties (eps) to the widest gap above;
    one cluster when the chosen cut's grouped silhouette is below min_grouped."""
    t = silhouette_rule(cands, gaps, eps, -1.0)
    chosen = [c for c in cands if c["threshold"] == t]
    if not chosen or chosen[0].get("score") is None or grouped(n, merges, chosen[0]) < min_grouped:
        return cands[-1]["threshold"] if cands else 0.0
    return t


def silhouette_rule(cands, gaps, eps, min_score=0.25):
    """Best mean silhouette (>= min_score, else one cluster); with eps > 0, among the candidates
    within eps of the best, the one with the widest gap above it (ties: fewer clusters)."""
    scored = [(i, c["score"]) for i, c in enumerate(cands) if c.get("score") is not None]
    if not scored:
        return cands[-1]["threshold"] if cands else 0.0
    best = max(s for _, s in scored)
    if best < min_score:
        return cands[-1]["threshold"]
    near = [i for i, s in scored if s >= best - max(eps, 1e-12)]
    if eps > 0:
        i = max(near, key=lambda i: (gaps[i] or 0.0, -cands[i]["n_clusters"]))
    else:
        i = min(near, key=lambda i: cands[i]["n_clusters"])
    return cands[i]["threshold"]


# Rules evaluated offline on every run's recorded candidates (the evidence for the choice).
# "auto" is the rule of shared/src/cluster/cut.rs (ties within 0.01 to the widest gap, one cluster
# when the chosen cut's grouped silhouette is below 0.4).
AUTO = None  # set per run below (needs the tree)
VARIANTS = {
    "silhouette max, one cluster below 0.25": lambda c, g, t: silhouette_rule(c, g, 0.0, 0.25),
    "silhouette max, one cluster below 0.5": lambda c, g, t: silhouette_rule(c, g, 0.0, 0.5),
    "ties within 0.01 to the widest gap, one cluster below 0.5":
        lambda c, g, t: silhouette_rule(c, g, 0.01, 0.5),
    "ties within 0.01 to the widest gap, one cluster below 0.25":
        lambda c, g, t: silhouette_rule(c, g, 0.01, 0.25),
    "ties within 0.01 to the widest gap, one cluster when its grouped silhouette < 0.5":
        lambda c, g, t: grouped_rule(t[0], t[1], c, g, 0.01, 0.5),
    "**auto**: as above, grouped silhouette < 0.4":
        lambda c, g, t: grouped_rule(t[0], t[1], c, g, 0.01, 0.4),
    "as auto, ties within 0.02": lambda c, g, t: grouped_rule(t[0], t[1], c, g, 0.02, 0.4),
    "as auto, grouped below 0.25": lambda c, g, t: grouped_rule(t[0], t[1], c, g, 0.01, 0.25),
}

rows = []
variants = []
checks = []
stale = []
for name in sorted(os.listdir(runs)):
    d = os.path.join(runs, name)
    if name.endswith("-gap") or not os.path.isfile(os.path.join(d, "summary.json")):
        continue
    case, seed = name.rsplit("-s", 1)
    summary = json.load(open(os.path.join(d, "summary.json")))
    clusters = json.load(open(os.path.join(d, "clusters.json")))
    truth = json.load(open(os.path.join(d, "truth.json")))
    c = clusters["clustering"]
    n, merges = c["dendrogram"]["n"], c["dendrogram"]["merges"]
    cut = c.get("cut") or {}
    cands = cut.get("candidates", [])
    scored = [x for x in cands if x.get("score") is not None]
    best = max(scored, key=lambda x: x["score"]) if scored else None
    k_true = len(set(truth))
    true_cand = [x for x in cands if x["n_clusters"] == k_true]
    auto = clusters["assignment"]
    t_gap = gap_threshold(merges)
    gap = cut_distance(n, merges, t_gap)
    base = {
        "case": case,
        "data": summary["data"].split(" ")[0],
        "clients": n,
        "seed": int(seed),
        "true_clusters": k_true,
        "best_silhouette": f'{best["score"]:.4f}' if best else "",
        "silhouette_at_true_k": (
            f'{true_cand[0]["score"]:.4f}'
            if true_cand and true_cand[0].get("score") is not None
            else ""
        ),
    }
    gaps = level_gaps(n, merges, cands)
    t_auto = grouped_rule(n, merges, cands, gaps, 0.01, 0.4)
    auto_now = cut_distance(n, merges, t_auto)
    if auto_now != auto:
        stale.append(name)
    rows.append({**base, "rule": "auto", "n_clusters": max(auto_now) + 1,
                 "ari": ari(truth, auto_now), "threshold": t_auto})
    rows.append({**base, "rule": "gap", "n_clusters": max(gap) + 1,
                 "ari": ari(truth, gap), "threshold": t_gap})
    for vname, rule in VARIANTS.items():
        lab = cut_distance(n, merges, rule(cands, gaps, (n, merges)))
        variants.append({"case": case, "seed": int(seed), "variant": vname,
                         "n_clusters": max(lab) + 1, "ari": ari(truth, lab),
                         "same_as_auto": lab == auto})
    g = os.path.join(runs, name + "-gap", "clusters.json")
    if os.path.isfile(g):
        real = json.load(open(g))["assignment"]
        checks.append((name, real == gap))

cols = ["case", "data", "clients", "seed", "rule", "n_clusters", "true_clusters", "ari",
        "threshold", "best_silhouette", "silhouette_at_true_k"]
with open(os.path.join(root, "autocut.csv"), "w") as f:
    f.write(",".join(cols) + "\n")
    for r in rows:
        f.write(",".join(
            f"{r[c]:.4f}" if isinstance(r[c], float) else str(r[c]) for c in cols) + "\n")

order = ["groups", "label2", "label3", "rotate4", "tasks10", "tasks100", "tasks1000",
         "tasks1000-server", "tasks10-subset", "tasks100-subset", "tasks1000-subset",
         "tasks1000-subset-server"]
groups = collections.defaultdict(list)
for r in rows:
    groups[(r["case"], r["rule"])].append(r)
lines = ["| case | data | clients | rule | seeds | ARI = 1 | min ARI | mean ARI | clusters found (true) |",
         "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for case in sorted({r["case"] for r in rows}, key=lambda c: order.index(c) if c in order else 99):
    for rule in ["auto", "gap"]:
        rs = sorted(groups[(case, rule)], key=lambda r: r["seed"])
        if not rs:
            continue
        found = collections.Counter(r["n_clusters"] for r in rs)
        true = sorted({r["true_clusters"] for r in rs})
        lines.append(
            f'| {case} | {rs[0]["data"]} | {rs[0]["clients"]} | {rule} | {len(rs)} | '
            f'{sum(r["ari"] > 1 - 1e-9 for r in rs)} | {min(r["ari"] for r in rs):.3f} | '
            f'{sum(r["ari"] for r in rs) / len(rs):.3f} | '
            + ", ".join(f"{k}×{v}" for k, v in sorted(found.items()))
            + f' ({", ".join(map(str, true))}) |')
lines.append("")
lines.append("Rules evaluated offline on the same runs (recorded silhouettes and merge heights): "
             "seeds with ARI = 1 / seeds, min ARI")
lines.append("")
vcases = sorted({v["case"] for v in variants},
                key=lambda c: order.index(c) if c in order else 99)
lines.append("| rule | " + " | ".join(vcases) + " |")
lines.append("| --- |" + " --- |" * len(vcases))
rule_rows = [("gap (largest gap)", [r for r in rows if r["rule"] == "gap"])]
rule_rows += [(k, [v for v in variants if v["variant"] == k]) for k in VARIANTS]
for vname, vs in rule_rows:
    cells = []
    for case in vcases:
        xs = [v for v in vs if v["case"] == case]
        cells.append(f'{sum(v["ari"] > 1 - 1e-9 for v in xs)}/{len(xs)}, '
                     f'{min(v["ari"] for v in xs):.3f}' if xs else "")
    lines.append(f"| {vname} | " + " | ".join(cells) + " |")
lines.append("")
lines.append("Runs whose recorded `auto` cut differs from the rule above (made by an earlier "
             "version of the rule; rerun them): " + (", ".join(stale) or "none"))
lines.append("")
lines.append("Offline gap cut equals a real `--lambda gap` run: "
             + ", ".join(f'{n}: {"yes" if ok else "NO"}' for n, ok in checks))
text = "\n".join(lines) + "\n"
open(os.path.join(root, "autocut.md"), "w").write(text)
print(text)
