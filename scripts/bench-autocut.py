#!/usr/bin/env python3
"""Tabulates the runs of scripts/bench-autocut.sh (BENCHMARKS.md §8). It only reads what the runs
wrote: each run's summary.json (`ari`, `n_clusters`, `threshold`) and clusters.json (the cut's
record, `clustering.cut`), and for `label:K` the partition's label sets (labelsets.json, from
`coordinator partition`). Nothing the product computes is recomputed here: the cut of both rules
(`--lambda auto` in CASE-sSEED, `--lambda gap` in CASE-sSEED-gap) and the ARI are the runs' own.
The product records no ARI for `label:K` (no ground-truth group); for those runs the table says
whether the clusters are exactly the clients' label sets (each cluster's clients hold one label
set, no two clusters the same one), a comparison of the two files, not an ARI.

Writes autocut.csv (one row per run) and autocut.md into the results directory (argument;
default bench-results/autocut). Standard library only."""
import collections
import json
import os
import sys

root = sys.argv[1] if len(sys.argv) > 1 else "bench-results/autocut"
runs = os.path.join(root, "runs")

ORDER = ["groups", "label2", "label3", "dir01", "rotate4", "tasks10", "tasks100", "tasks1000",
         "tasks1000-server", "tasks10-subset", "tasks100-subset", "tasks1000-subset",
         "tasks1000-subset-server"]
SEEDS = 10


def load(path):
    with open(path) as f:
        return json.load(f)


def same_as_label_sets(assignment, labels):
    """True when the clusters are exactly the groups of clients holding the same label set."""
    by_cluster = collections.defaultdict(set)
    by_set = collections.defaultdict(set)
    for a, ls in zip(assignment, labels):
        by_cluster[a].add(tuple(ls))
        by_set[tuple(ls)].add(a)
    return (len(assignment) == len(labels)
            and all(len(v) == 1 for v in by_cluster.values())
            and all(len(v) == 1 for v in by_set.values()))


rows = []
for name in sorted(os.listdir(runs)):
    d = os.path.join(runs, name)
    if not os.path.isfile(os.path.join(d, "summary.json")):
        continue
    base, rule = (name[:-4], "gap") if name.endswith("-gap") else (name, "auto")
    case, seed = base.rsplit("-s", 1)
    summary = load(os.path.join(d, "summary.json"))
    cl = load(os.path.join(d, "clusters.json"))["clustering"]
    cut = cl.get("cut") or {}
    cands = cut.get("candidates", [])
    chosen = cands[cut["chosen"]] if cut.get("chosen") is not None else {}
    # The candidate with the highest recorded score (a look-up, not the rule: ties go elsewhere).
    top = max((c for c in cands if c.get("score") is not None), key=lambda c: c["score"],
              default={}) if cut.get("rule") == "silhouette" else {}
    r = {
        "case": case,
        "seed": int(seed),
        "rule": rule,
        "data": "subset" if "fmnist-subset" in summary["data"] else "full",
        "clients": len(summary["assignment"]),
        "n_clusters": summary["n_clusters"],
        "ari": summary["ari"],
        "threshold": summary["threshold"],
        "cut_rule": cut.get("rule", ""),
        "min_score": cut.get("min_score"),
        "min_score_of": cut.get("min_score_of", ""),
        "tie": cut.get("tie"),
        "chosen_score": chosen.get("score"),
        "chosen_grouped_score": chosen.get("grouped_score"),
        "top_score_clusters": top.get("n_clusters"),
        "top_score": top.get("score"),
        "top_grouped_score": top.get("grouped_score"),
        "label_sets": None,
        "same_as_label_sets": None,
        "wall_seconds": summary["wall_seconds"],
    }
    ls_path = os.path.join(runs, base, "labelsets.json")
    if case.startswith("label") and os.path.isfile(ls_path):
        labels = load(ls_path)["labels"]
        r["label_sets"] = len({tuple(x) for x in labels})
        r["same_as_label_sets"] = same_as_label_sets(summary["assignment"], labels)
    rows.append(r)

rows.sort(key=lambda r: (ORDER.index(r["case"]) if r["case"] in ORDER else 99, r["rule"], r["seed"]))
cols = list(rows[0].keys()) if rows else []


def fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


with open(os.path.join(root, "autocut.csv"), "w") as f:
    f.write(",".join(cols) + "\n")
    for r in rows:
        f.write(",".join(fmt(r[c]) for c in cols) + "\n")


def f3(x):
    return "n/a" if x is None else f"{x:.3f}".replace("-0.000", "−0.000")


def counts(rs):
    c = collections.Counter(r["n_clusters"] for r in rs)
    return ", ".join(f"{k} × {v}" for k, v in sorted(c.items(), key=lambda kv: (-kv[1], kv[0])))


def seeds_of(rs):
    s = sorted(r["seed"] for r in rs)
    if s == list(range(s[0], s[-1] + 1)) and len(s) > 1:
        return f"{len(s)} ({s[0]}-{s[-1]})"
    return f"{len(s)} ({', '.join(map(str, s))})"


def reached(rs):
    """Seeds with ARI = 1 (as the runs recorded it); for label:K, seeds whose clusters are the
    label sets."""
    if all(r["ari"] is None for r in rs):
        if all(r["same_as_label_sets"] is not None for r in rs):
            return f'{sum(r["same_as_label_sets"] for r in rs)} (= label sets)'
        return "n/a"
    return str(sum(r["ari"] is not None and r["ari"] >= 1 - 1e-12 for r in rs))


def min_ari(rs):
    a = [r["ari"] for r in rs if r["ari"] is not None]
    return f3(min(a)) if a else "n/a"


by = collections.defaultdict(list)
for r in rows:
    by[(r["case"], r["rule"])].append(r)
cases = sorted({r["case"] for r in rows}, key=lambda c: ORDER.index(c) if c in ORDER else 99)

lines = [
    "Every cell is read from the runs under runs/ (summary.json: `ari`, `n_clusters`); "
    "`auto` = CASE-sSEED (`--lambda auto`), `gap` = CASE-sSEED-gap (`--lambda gap`). "
    "ARI = 1: seeds whose recorded ARI is 1 (`label:K` has no recorded ARI: seeds whose clusters "
    "are exactly the clients' label sets, from labelsets.json).",
    "",
    "| case | data | clients | `auto`: seeds | `auto`: ARI = 1 | `auto`: min ARI | `auto`: clusters "
    "| `gap`: seeds | `gap`: ARI = 1 | `gap`: min ARI | `gap`: clusters |",
    "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
]
for case in cases:
    a, g = by[(case, "auto")], by[(case, "gap")]
    any_ = a or g
    cells = [case, any_[0]["data"], str(any_[0]["clients"])]
    for rs in (a, g):
        if rs:
            cells += [seeds_of(rs), reached(rs), min_ari(rs), counts(rs)]
        else:
            cells += ["0 (not run)", "", "", ""]
    lines.append("| " + " | ".join(cells) + " |")

lines += ["", "Label sets held (`label:K`, from labelsets.json): " + "; ".join(
    f'{case} seed {r["seed"]}: {r["label_sets"]}'
    for case in cases if case.startswith("label")
    for r in by[(case, "auto")] if r["label_sets"] is not None)]

params = collections.Counter(
    (r["cut_rule"], r["min_score"], r["min_score_of"], r["tie"]) for r in rows)
lines += ["", "The cut's parameters as each run's clusters.json records them "
          "(`clustering.cut`: rule, min_score, min_score_of, tie): " + "; ".join(
              f"{rule} / {ms} / {of or '-'} / {tie}: {n} runs"
              for (rule, ms, of, tie), n in sorted(params.items(), key=lambda kv: str(kv[0])))]

lines += ["", "Per run: clusters and ARI of each rule; from `auto`'s clusters.json, the chosen "
          "candidate's recorded mean silhouette (`score`) and grouped silhouette "
          "(`grouped_score`, the one the bound applies to; none when the cut is one cluster), "
          "and the candidate with the highest recorded `score`: its cluster count, score and "
          "grouped score (a look-up in the record, not the rule: within the tie margin the rule "
          "may take another candidate, and below the bound it answers one cluster).", "",
          "| case | seed | `auto` clusters | `auto` ARI | chosen score | chosen grouped | "
          "top score at k | top score | its grouped | `gap` clusters | `gap` ARI |",
          "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
for case in cases:
    seeds = sorted({r["seed"] for r in by[(case, "auto")] + by[(case, "gap")]})
    for s in seeds:
        a = next((r for r in by[(case, "auto")] if r["seed"] == s), None)
        g = next((r for r in by[(case, "gap")] if r["seed"] == s), None)
        cells = [case, str(s)]
        cells += ([str(a["n_clusters"]), f3(a["ari"]) if a["ari"] is not None else
                   ("= label sets" if a["same_as_label_sets"] else
                    "n/a" if a["same_as_label_sets"] is None else "≠ label sets"),
                   f3(a["chosen_score"]) if a["chosen_score"] is not None else "-",
                   f3(a["chosen_grouped_score"]) if a["chosen_grouped_score"] is not None
                   else "-",
                   str(a["top_score_clusters"]) if a["top_score_clusters"] else "-",
                   f3(a["top_score"]) if a["top_score"] is not None else "-",
                   f3(a["top_grouped_score"]) if a["top_grouped_score"] is not None
                   else "-"] if a else ["not run", "", "", "", "", "", ""])
        cells += ([str(g["n_clusters"]), f3(g["ari"]) if g["ari"] is not None else
                   ("= label sets" if g["same_as_label_sets"] else
                    "n/a" if g["same_as_label_sets"] is None else "≠ label sets")]
                  if g else ["not run", ""])
        lines.append("| " + " | ".join(cells) + " |")

missing = [f"{c}-s{s}{'' if rule == 'auto' else '-gap'}"
           for c in cases for rule in ("auto", "gap")
           for s in range(SEEDS) if not any(r["seed"] == s for r in by[(c, rule)])]
lines += ["", "Runs missing (of seeds 0-9): "
          + (", ".join(missing) or "none")]
text = "\n".join(lines) + "\n"
with open(os.path.join(root, "autocut.md"), "w") as f:
    f.write(text)
print(text)
