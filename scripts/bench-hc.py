#!/usr/bin/env python3
"""Hierarchical clustering time: edgecfl beside scipy, on the same data, in one run.

    python3 scripts/bench-hc.py                   # n = 1000 and 10000, 850 dimensions
    python3 scripts/bench-hc.py 2000 --reps 5 --out results-local/hc

Builds and runs `hc_bench` (shared/examples/hc_bench.rs) with `--dump`, then times scipy's
`pdist` (on the same points widened to float64, as edgecfl computes) and `linkage` for every
method on the same data right after it, and checks that both agree: 10 000 seeded pairs of the
distance matrix and every merge height (sorted) within a relative 1e-9. Writes
`OUT/hc.json` (raw) and `OUT/hc.md` (the table of BENCHMARKS.md §4, with the ratios). Time it on
an idle machine: the script prints the load average before it starts.

Needs numpy and scipy (Debian: python3-numpy python3-scipy).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy
from scipy.cluster.hierarchy import linkage
from scipy.spatial.distance import pdist

METHODS = ["single", "complete", "average", "weighted", "ward"]
RTOL = 1e-9
ROOT = Path(__file__).resolve().parent.parent


def median_time(reps, f):
    times, out = [], None
    for _ in range(reps):
        t = time.perf_counter()
        out = f()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def rel_err(a, b):
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    scale = np.maximum(np.abs(b), 1e-300)
    return float(np.max(np.abs(a - b) / scale)) if a.size else 0.0


def cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sizes", nargs="*", type=int, default=[1000, 10000])
    ap.add_argument("--dim", type=int, default=850)
    ap.add_argument("--reps", type=int, help="repeats (default 3 for n <= 2000, else 1)")
    ap.add_argument("--out", default="bench-results/hc", help="where hc.json and hc.md go")
    args = ap.parse_args()

    load_before = os.getloadavg()
    print(f"load average before: {load_before[0]:.2f} {load_before[1]:.2f} {load_before[2]:.2f}", flush=True)
    print("building hc_bench (release) ...", flush=True)
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "edgecfl-shared", "--example", "hc_bench"],
        cwd=ROOT, check=True)
    exe = ROOT / "target" / "release" / "examples" / "hc_bench"

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-hc-") as tmp:
        for n in args.sizes:
            reps = args.reps or (3 if n <= 2000 else 1)
            cmd = [str(exe), str(n), "--dim", str(args.dim), "--reps", str(reps), "--dump", tmp]
            print(f"n = {n}: edgecfl ...", flush=True)
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            ours = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
            threads = ours[0]["threads"]
            ours_time = {("euclidean" if r["step"] == "euclidean" else r["method"]): r["median_s"] for r in ours}

            print(f"n = {n}: scipy ...", flush=True)
            x = np.fromfile(Path(tmp) / f"points-{n}.f32", dtype="<f4").reshape(n, args.dim)
            x64 = x.astype(np.float64)
            t_pdist, d = median_time(reps, lambda: pdist(x64))
            pairs = np.fromfile(Path(tmp) / f"pairs-{n}.bin", dtype=[("i", "<u4"), ("j", "<u4"), ("d", "<f8")])
            want = np.array([0.0 if i == j else np.sqrt(np.sum((x64[i] - x64[j]) ** 2))
                             for i, j in zip(pairs["i"], pairs["j"])])
            mask = pairs["i"] != pairs["j"]
            i, j = np.minimum(pairs["i"], pairs["j"])[mask].astype(np.int64), np.maximum(pairs["i"], pairs["j"])[mask].astype(np.int64)
            scipy_pairs = d[n * i - i * (i + 1) // 2 + (j - i - 1)]
            row = {
                "n": n, "dim": args.dim, "reps": reps, "edgecfl_threads": threads,
                "euclidean": {
                    "edgecfl_s": ours_time["euclidean"], "scipy_s": round(t_pdist, 4),
                    "max_rel_err_vs_scipy": rel_err(pairs["d"][mask], scipy_pairs),
                    "max_rel_err_vs_direct": rel_err(pairs["d"][mask], want[mask]),
                },
            }
            for m in METHODS:
                t_link, z = median_time(reps, lambda: linkage(d, method=m))
                heights = np.fromfile(Path(tmp) / f"heights-{n}-{m}.f64", dtype="<f8")
                err = rel_err(np.sort(heights), np.sort(z[:, 2]))
                total_ours = ours_time["euclidean"] + ours_time[m]
                total_scipy = t_pdist + t_link
                row[m] = {
                    "edgecfl_s": ours_time[m], "scipy_s": round(t_link, 4),
                    "max_rel_err_heights": err,
                    "end_to_end_edgecfl_s": round(total_ours, 4),
                    "end_to_end_scipy_s": round(total_scipy, 4),
                    "end_to_end_ratio": round(total_ours / total_scipy, 3),
                }
            del d
            rows.append(row)
            worst = max([row["euclidean"]["max_rel_err_vs_scipy"]] + [row[m]["max_rel_err_heights"] for m in METHODS])
            print(f"n = {n}: done, worst relative difference to scipy {worst:.1e}", flush=True)

    agree = all(r["euclidean"]["max_rel_err_vs_scipy"] <= RTOL and all(r[m]["max_rel_err_heights"] <= RTOL for m in METHODS) for r in rows)
    meta = {
        "command": "python3 scripts/bench-hc.py " + " ".join(sys.argv[1:]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu_model(), "cores": os.cpu_count(),
        "load_average_before": [round(v, 2) for v in load_before],
        "scipy": scipy.__version__, "numpy": np.__version__, "python": platform.python_version(),
        "tolerance": RTOL, "all_agree": agree,
    }
    outdir = ROOT / args.out if not Path(args.out).is_absolute() else Path(args.out)
    outdir.mkdir(parents=True, exist_ok=True)
    (outdir / "hc.json").write_text(json.dumps({"meta": meta, "results": rows}, indent=1) + "\n")

    md = [f"`{meta['command']}`: {meta['date']}, {meta['cpu']}, {meta['cores']} cores, load average before "
          f"{' '.join(str(v) for v in meta['load_average_before'])}; scipy {meta['scipy']}, numpy {meta['numpy']}. "
          f"edgecfl on {rows[0]['edgecfl_threads'] if rows else '?'} threads, scipy's `pdist` and `linkage` single-threaded. "
          f"Every compared distance and merge height within a relative {RTOL:g} of scipy's: {'yes' if agree else 'NO'}.", "",
          "| n × dim | step | edgecfl s | scipy s | ratio | end to end (distances + linkage): edgecfl / scipy |",
          "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        e = r["euclidean"]
        md.append(f"| {r['n']} × {r['dim']} | Euclidean distances | {e['edgecfl_s']:.3f} | {e['scipy_s']:.3f} | {e['edgecfl_s'] / e['scipy_s']:.2f} | |")
        for m in METHODS:
            v = r[m]
            md.append(f"| {r['n']} × {r['dim']} | {m} linkage | {v['edgecfl_s']:.3f} | {v['scipy_s']:.3f} | "
                      f"{v['edgecfl_s'] / v['scipy_s']:.2f} | {v['end_to_end_edgecfl_s']:.2f} s / {v['end_to_end_scipy_s']:.2f} s = {v['end_to_end_ratio']:.2f} |")
    (outdir / "hc.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    if not agree:
        sys.exit("edgecfl and scipy disagree beyond the tolerance")


if __name__ == "__main__":
    main()
