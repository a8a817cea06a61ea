#!/usr/bin/env bash
# BENCHMARKS.md §8: the automatic cut (`--lambda auto`, best mean silhouette) against the largest-gap
# rule (`--lambda gap`) on every partition with a known clustering (and dir:0.1), seeds 0-9, round 0
# only.
#
# Usage: [SEEDS="0 1"] [SEEDS_TASKS1000="0 1"] [RULES="auto gap"] [BIN=path/to/coordinator] \
#          scripts/bench-autocut.sh [CASE...]
#   CASE: groups label2 label3 dir01 rotate4 tasks10 tasks100 tasks1000-server tasks10-subset
#         tasks100-subset tasks1000-subset-server tasks1000 (default: all, in that order);
#         tasks1000-subset is available but not in the default. The `-server` cases compute the
#         relevance on the coordinator (`--relevance server`), which takes seconds where the
#         paper's way (every client multiplies all 2 000 relayed eigenvectors by its Gram matrix)
#         takes 2.5-5 minutes a run on the 2-core VM, so tasks1000 comes last in each rule's
#         sweep, with its own seeds SEEDS_TASKS1000 (default: SEEDS).
#
# Every cell of the table is a real run of the product: one `coordinator simulate --rounds 0
# --lambda RULE` into bench-results/autocut/runs/CASE-sSEED (RULE auto) or CASE-sSEED-gap (RULE
# gap); a run is skipped when its summary.json exists, so the script resumes (delete runs/ to
# redo them all). The runs go rule by rule, seed by seed, case by case (tasks1000 last), so an
# interrupted sweep leaves whole seeds missing, never a case. `dir01` (Dirichlet 0.1, §1's
# partition) has no ground truth: only its cluster counts are tabulated. The ARI and the cluster
# count come from each run's summary.json, the cut's record (`clustering.cut`: rule, scores,
# bound, tie margin) from its clusters.json. For `label:K` the product records no ARI (no ground-truth
# group); the partition's label set of each client is saved beside those runs as
# labelsets.json (from `coordinator partition`).
# Output: bench-results/autocut/autocut.csv and autocut.md (tables, by scripts/bench-autocut.py,
# which only reads the run files); the runs' json files (FedClust centroids emptied, 850 floats a
# cluster), the dendrogram plot of seed 0's `auto` run only, MT-HFL's relevance.csv only up to
# 100 clients.
set -euo pipefail
cd "$(dirname "$0")/.."
# BIN: a copy of the binary, so that a rebuild of target/ during the sweep cannot change it.
bin=${BIN:-target/release/coordinator}
[ -x "$bin" ] || nice -n 10 cargo build --release -p coordinator
bin_sha=$(sha256sum "$bin" | cut -d' ' -f1)
# The cases without --data need the full Fashion-MNIST: without it the product falls back on the
# bundled subset, which would make them subset runs under a "full" name.
[ -n "${EDGECFL_FMNIST_DIR:-}" ] || [ -d /usr/share/datasets/fashion-mnist ] || {
  echo "full Fashion-MNIST missing: apt-get install dataset-fashion-mnist (or EDGECFL_FMNIST_DIR)" >&2
  exit 1
}
root=bench-results/autocut
mkdir -p "$root/runs"
seeds=${SEEDS:-0 1 2 3 4 5 6 7 8 9}
seeds1000=${SEEDS_TASKS1000:-$seeds}
rules=${RULES:-auto gap}
subset=shared/data/fmnist-subset
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(groups label2 label3 dir01 rotate4 tasks10 tasks100 tasks1000-server \
  tasks10-subset tasks100-subset tasks1000-subset-server tasks1000)

args_of() {
  local mt="--algorithm mthfl --partition tasks:fmnist3 --eigenvectors 2 --signature-encoding f16"
  case "$1" in
    groups) echo "--algorithm fedclust --partition groups:012-34-56-789 --clients 100" ;;
    label2) echo "--algorithm fedclust --partition label:2 --clients 100" ;;
    label3) echo "--algorithm fedclust --partition label:3 --clients 100" ;;
    dir01) echo "--algorithm fedclust --partition dir:0.1 --clients 100" ;;
    rotate4) echo "--algorithm fedclust --partition rotate:4 --clients 100 --warmup-epochs 5" ;;
    tasks10) echo "$mt --clients 10" ;;
    tasks100) echo "$mt --clients 100" ;;
    tasks1000) echo "$mt --clients 1000" ;;
    tasks10-subset) echo "$mt --clients 10 --data $subset" ;;
    tasks100-subset) echo "$mt --clients 100 --data $subset" ;;
    tasks1000-subset) echo "$mt --clients 1000 --data $subset" ;;
    tasks1000-server) echo "$mt --clients 1000 --relevance server" ;;
    tasks1000-subset-server) echo "$mt --clients 1000 --data $subset --relevance server" ;;
    *) echo "unknown case $1" >&2; exit 2 ;;
  esac
}

# label:K has no ground-truth group: keep each client's label set from `coordinator partition`.
labelsets() { # CASE SEED OUT
  local a; a=$(args_of "$1")
  local part clients
  part=$(sed -E 's/.*--partition ([^ ]+).*/\1/' <<<"$a")
  clients=$(sed -E 's/.*--clients ([0-9]+).*/\1/' <<<"$a")
  "$bin" partition --partition "$part" --clients "$clients" --seed "$2" 2>/dev/null |
    python3 -c '
import json, sys
p = json.load(sys.stdin)
json.dump({"command": sys.argv[1], "labels": [sorted(c["labels"]) for c in p["clients"]]}, sys.stdout)
print()' "coordinator partition --partition $part --clients $clients --seed $2" > "$3"
}

run() { # CASE SEED RULE
  local c=$1 s=$2 rule=$3 out="$root/runs/$1-s$2"
  [ "$rule" = auto ] || out="$out-$rule"
  if [ ! -f "$out/summary.json" ]; then
    rm -rf "$out"
    local cmd="simulate $(args_of "$c") --rounds 0 --seed $s --lambda $rule --out $out"
    printf '$ coordinator %s\n# coordinator binary sha256 %s\n' "$cmd" "$bin_sha" > "$out.log"
    # shellcheck disable=SC2086
    nice -n 10 "$bin" $cmd >> "$out.log" 2>&1 || { echo "FAILED $c seed $s $rule (see $out.log)"; exit 1; }
    mv "$out.log" "$out/run.log"
    # Plots: the dendrogram of seed 0's `auto` run only (it shows each candidate's score).
    if [ "$s" != 0 ] || [ "$rule" != auto ]; then rm -f "$out"/*.svg
    else find "$out" -maxdepth 1 -name '*.svg' ! -name dendrogram.svg -delete; fi
    [[ "$c" == tasks1000* ]] && rm -f "$out/relevance.csv"
    # FedClust's centroids (850 floats a cluster) are not used here: emptied to keep the files small.
    python3 -c '
import json, sys
f = sys.argv[1]
c = json.load(open(f))
if c["clustering"].get("centroids"):
    c["clustering"]["centroids"] = []
    json.dump(c, open(f, "w"), indent=2)' "$out/clusters.json"
  fi
  if [[ "$c" == label* && ! -f "$out/labelsets.json" ]]; then labelsets "$c" "$s" "$out/labelsets.json"; fi
  python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print(sys.argv[2], "clusters", s["n_clusters"], "ari", s["ari"], "wall", round(s["wall_seconds"],1), flush=True)' \
    "$out/summary.json" "$(basename "$out")"
}

for rule in $rules; do
  for s in $seeds; do
    for c in "${cases[@]}"; do
      [ "$c" = tasks1000 ] || run "$c" "$s" "$rule"
    done
  done
  for c in "${cases[@]}"; do
    if [ "$c" = tasks1000 ]; then for s in $seeds1000; do run tasks1000 "$s" "$rule"; done; fi
  done
done
python3 scripts/bench-autocut.py "$root"
