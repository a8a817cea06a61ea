#!/usr/bin/env python3
"""Benchmark 5 of BENCHMARKS.md: MT-HFL vs random clustering on tasks:fmnist3, from
bench-results/mthfl/<algorithm>-seed<S>/summary.json (written by scripts/bench-mthfl.sh).

Prints a markdown table of per-task accuracy (mean ± sample std over seeds) at a few rounds, the
ARI of the clusterings, and writes bench-results/mthfl/task-accuracy.svg: one panel per task,
one curve per algorithm with a band of ± one std. Standard library only (no matplotlib here).

Per-task accuracy (summary.json `task_accuracy_per_round`): the mean over the users of a task of
their LPS model's accuracy on the test samples of that task's labels.

Usage: python3 scripts/bench-mthfl-table.py [RESULTS_DIR]
"""
import glob
import json
import math
import os
import re
import sys

TASKS = ["task 1: clothes {0,1,2,3,4,6}", "task 2: shoes {5,7,9}", "task 3: bags {8}"]
COLORS = {"mthfl": "#1f77b4", "random": "#d62728"}
NAMES = {"mthfl": "MT-HFL (relevance clustering)", "random": "random clustering (baseline)"}


def mean_std(xs):
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    if not xs:
        return float("nan"), float("nan"), 0
    m = sum(xs) / len(xs)
    s = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) if len(xs) > 1 else 0.0
    return m, s, len(xs)


def load(root):
    runs = {}
    for path in sorted(glob.glob(os.path.join(root, "*-seed*", "summary.json"))):
        m = re.match(r"(.+)-seed(\d+)$", os.path.basename(os.path.dirname(path)))
        if not m:
            continue
        s = json.load(open(path))
        per_round = s.get("task_accuracy_per_round") or []
        if len(per_round) < s["config"]["federation"]["rounds"] or any(r is None for r in per_round):
            print(f"skipping unfinished run {path}", file=sys.stderr)
            continue
        runs.setdefault(m.group(1), []).append((int(m.group(2)), s))
    return runs


def curves(runs):
    """alg -> task -> list over rounds of (mean, std, n)."""
    out = {}
    for alg, lst in runs.items():
        rounds = min(len(s["task_accuracy_per_round"]) for _, s in lst)
        out[alg] = [
            [mean_std([100 * s["task_accuracy_per_round"][r][t] for _, s in lst]) for r in range(rounds)]
            for t in range(len(TASKS))
        ]
    return out


def svg(curv, path):
    w, h, pad_l, pad_r, pad_t, pad_b = 360, 300, 52, 12, 40, 44
    total_w = w * len(TASKS)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{total_w}" height="{h + 30}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{total_w}" height="{h + 30}" fill="white"/>']
    rounds = max(len(c[0]) for c in curv.values())
    for t, title in enumerate(TASKS):
        x0 = t * w
        pw, ph = w - pad_l - pad_r, h - pad_t - pad_b
        lo = min(max(0.0, m - s) for c in curv.values() for m, s, _ in c[t] if not math.isnan(m))
        lo = max(0.0, math.floor(lo / 10) * 10)
        X = lambda r: x0 + pad_l + pw * (r - 1) / max(1, rounds - 1)
        Y = lambda a: pad_t + ph * (1 - (a - lo) / (100 - lo))
        parts.append(f'<text x="{x0 + w / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>')
        parts.append(f'<rect x="{x0 + pad_l}" y="{pad_t}" width="{pw}" height="{ph}" fill="none" stroke="black"/>')
        for a in range(int(lo), 101, 10):
            parts.append(f'<line x1="{x0 + pad_l}" x2="{x0 + pad_l + pw}" y1="{Y(a):.1f}" y2="{Y(a):.1f}" stroke="#ddd"/>')
            parts.append(f'<text x="{x0 + pad_l - 4}" y="{Y(a) + 4:.1f}" text-anchor="end">{a}</text>')
        step = max(1, rounds // 6)
        for r in list(range(1, rounds + 1, step)) + [rounds]:
            parts.append(f'<text x="{X(r):.1f}" y="{pad_t + ph + 16}" text-anchor="middle">{r}</text>')
        parts.append(f'<text x="{x0 + pad_l + pw / 2}" y="{pad_t + ph + 34}" text-anchor="middle">round</text>')
        if t == 0:
            parts.append(f'<text x="{x0 + 14}" y="{pad_t + ph / 2}" transform="rotate(-90 {x0 + 14} {pad_t + ph / 2})" '
                         f'text-anchor="middle">accuracy on the task\'s labels (%)</text>')
        for alg, c in sorted(curv.items()):
            pts = [(r + 1, m, s) for r, (m, s, _) in enumerate(c[t]) if not math.isnan(m)]
            color = COLORS.get(alg, "#555")
            band = [f"{X(r):.1f},{Y(min(100, m + s)):.1f}" for r, m, s in pts] + \
                   [f"{X(r):.1f},{Y(max(lo, m - s)):.1f}" for r, m, s in reversed(pts)]
            parts.append(f'<polygon points="{" ".join(band)}" fill="{color}" fill-opacity="0.18" stroke="none"/>')
            line = " ".join(f"{X(r):.1f},{Y(m):.1f}" for r, m, _ in pts)
            parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="2"/>')
    lx = 20
    for alg in sorted(curv):
        n = curv[alg][0][0][2]
        parts.append(f'<line x1="{lx}" x2="{lx + 24}" y1="{h + 14}" y2="{h + 14}" stroke="{COLORS.get(alg, "#555")}" stroke-width="3"/>')
        parts.append(f'<text x="{lx + 30}" y="{h + 18}">{NAMES.get(alg, alg)}: mean ± std over {n} seeds</text>')
        lx += 420
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "bench-results/mthfl"
    runs = load(root)
    if not runs:
        sys.exit(f"no finished run under {root}; run scripts/bench-mthfl.sh first")
    curv = curves(runs)
    rounds = min(len(c[0]) for c in curv.values())
    at = sorted({r for r in [1, 5, 10, 20, rounds] if r <= rounds})
    print("| algorithm | seeds | ARI (mean, min) | task | " + " | ".join(f"round {r}" for r in at) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in at) + " |")
    for alg in sorted(runs, key=lambda a: (a != "mthfl", a)):
        aris = [s["ari"] for _, s in runs[alg]]
        ari = f"{sum(aris) / len(aris):.3f}, {min(aris):.3f}"
        for t, name in enumerate(TASKS):
            cells = []
            for r in at:
                m, s, _ = curv[alg][t][r - 1]
                cells.append(f"{m:.2f} ± {s:.2f}")
            lead = f"| {alg} | {len(runs[alg])} | {ari} |" if t == 0 else "| | | |"
            print(f"{lead} {name} | " + " | ".join(cells) + " |")
    walls = {alg: mean_std([s["wall_seconds"] for _, s in lst])[0] for alg, lst in runs.items()}
    print()
    print("mean wall time per run: " + ", ".join(f"{a} {w:.0f} s" for a, w in sorted(walls.items())))
    out = os.path.join(root, "task-accuracy.svg")
    svg(curv, out)
    print(f"plot: {out}")


if __name__ == "__main__":
    main()
