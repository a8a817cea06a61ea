#!/usr/bin/env python3
"""Tables and plots of the method comparison (scripts/experiments.sh).

Reads bench-results/experiments/<grid>/<run>/summary.json, prints one markdown table per grid
(final and best accuracy, rounds to reach 95 % of the final figure, clusters found, final ARI,
bytes up and down per client) and writes, per grid, accuracy.svg (accuracy per round, one line per
run) and clusters.svg (clusters per round), one pair per partition (accuracy-<partition>.svg) in
grids that span several, and per sampling fraction (accuracy-<partition>-f<frac>.svg) in grids
that span several of those. Plain SVG: no plotting library needed.

Usage: python3 scripts/experiments-report.py [ROOT]   (default bench-results/experiments)
"""
import glob
import json
import os
import sys

ROOT = sys.argv[1] if len(sys.argv) > 1 else "bench-results/experiments"
COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf"]


def svg(path, title, ylabel, series, ymin=None, ymax=None):
    """Writes a line plot: series = [(label, [y per round])]."""
    w, h, left, right, top, bottom = 760, 420, 60, 210, 30, 45
    pts = [y for _, ys in series for y in ys if y is not None]
    if not pts:
        return
    lo = min(pts) if ymin is None else ymin
    hi = max(pts) if ymax is None else ymax
    hi = hi if hi > lo else lo + 1
    n = max(len(ys) for _, ys in series)
    x = lambda i: left + (w - left - right) * (i / max(n - 1, 1))
    y = lambda v: top + (h - top - bottom) * (1 - (v - lo) / (hi - lo))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="18" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{left}" y1="{h - bottom}" x2="{w - right}" y2="{h - bottom}" stroke="black"/>',
           f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>',
           f'<text x="{(w - right + left) / 2}" y="{h - 8}" text-anchor="middle">round</text>',
           f'<text x="14" y="{h / 2}" transform="rotate(-90 14 {h / 2})" text-anchor="middle">{ylabel}</text>']
    for k in range(5):
        v = lo + (hi - lo) * k / 4
        out.append(f'<text x="{left - 5}" y="{y(v) + 4}" text-anchor="end">{v:.3g}</text>')
        out.append(f'<line x1="{left}" y1="{y(v)}" x2="{w - right}" y2="{y(v)}" stroke="#ddd"/>')
    for r in sorted({1, n} | {n * k // 4 for k in range(1, 4)}):
        if r >= 1:
            out.append(f'<text x="{x(r - 1)}" y="{h - bottom + 15}" text-anchor="middle">{r}</text>')
    for i, (label, ys) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        line = " ".join(f"{x(j):.1f},{y(v):.1f}" for j, v in enumerate(ys) if v is not None)
        out.append(f'<polyline points="{line}" fill="none" stroke="{c}" stroke-width="1.5"/>')
        ly = top + 16 * i
        out.append(f'<line x1="{w - right + 10}" y1="{ly}" x2="{w - right + 30}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{w - right + 35}" y="{ly + 4}">{label}</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out))


def rounds_to(acc, frac=0.95):
    final = acc[-1]
    for i, a in enumerate(acc):
        if a >= frac * final:
            return i + 1
    return len(acc)


for grid in sorted(os.listdir(ROOT)) if os.path.isdir(ROOT) else []:
    runs = []
    for path in sorted(glob.glob(f"{ROOT}/{grid}/*/summary.json")):
        s = json.load(open(path))
        acc = [a for a in s["accuracy_per_round"] if a is not None]
        if acc:
            runs.append((os.path.basename(os.path.dirname(path)), s, acc))
    if not runs:
        continue
    print(f"\n### {grid}\n")
    print("| run | method | partition | rounds | final acc. | best | rounds to 95 % of final | "
          "clusters (final) | ARI (final) | up / down per client |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, s, acc in runs:
        ari = s.get("final_ari")
        mb = lambda b: f"{b / 1e6:.2f} MB" if b is not None else "–"
        print(f"| {name} | {s['algorithm']} | {s['partition']} | {len(acc)} | {100 * acc[-1]:.2f} | "
              f"{100 * max(acc):.2f} | {rounds_to(acc)} | {s['n_clusters']} | "
              f"{'–' if ari is None else f'{ari:.3f}'} | "
              f"{mb(s.get('bytes_up_per_client'))} / {mb(s.get('bytes_down_per_client'))} |")
    # One pair of plots per partition (and sampling fraction) when the grid spans several (ten
    # lines at most a plot).
    frac = lambda s: s["config"]["federation"]["frac"]
    keys = sorted({(s["partition"], frac(s)) for _, s, _ in runs})
    by_part = len({p for p, _ in keys}) > 1
    by_frac = len({f for _, f in keys}) > 1
    written = set()
    for part, f in keys:
        group = [r for r in runs if (not by_part or r[1]["partition"] == part)
                 and (not by_frac or frac(r[1]) == f)]
        tag = ("-" + part.replace(":", "-").replace("*", "x") if by_part else "") + \
            (f"-f{f:g}" if by_frac else "")
        title = grid + (f", {part}" if by_part else "") + (f", {100 * f:g} % sampled" if by_frac else "")
        for kind, label, series, ymin in (
                ("accuracy", "mean local test accuracy", [(n, [100 * a for a in acc]) for n, _, acc in group], None),
                ("clusters", "clusters per round", [(n, s.get("clusters_per_round", [])) for n, s, _ in group], 0)):
            svg(f"{ROOT}/{grid}/{kind}{tag}.svg", f"{title}: {label}", kind, series, ymin=ymin)
            written.add(f"{kind}{tag}.svg")
    # Plots of an earlier grouping (e.g. before a grid spanned several partitions) are stale.
    for old in glob.glob(f"{ROOT}/{grid}/accuracy*.svg") + glob.glob(f"{ROOT}/{grid}/clusters*.svg"):
        if os.path.basename(old) not in written:
            os.remove(old)
