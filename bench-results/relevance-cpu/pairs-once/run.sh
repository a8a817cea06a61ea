#!/usr/bin/env bash
# MT-HFL's server-side relevance rows before and after computing each pair's dot products once
# (both r(i, j) and r(j, i) from one block product), the two coordinators alternating.
# Needs release builds of `coordinator` from before and after, in target/relev-before/ and
# target/relev-after/ (`cargo build --release -p coordinator`, each copied there).
# Usage: bench-results/relevance-cpu/pairs-once/run.sh [ROUNDS]
# OUT and SIDES (default "before after"; each side's binary in target/relev-SIDE/) set another
# comparison (../tiles/run.sh).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-bench-results/relevance-cpu/pairs-once}
# shellcheck disable=SC2206
SIDES=(${SIDES:-before after})
R=${1:-3}
{
  uptime
  for r in $(seq 1 "$R"); do
    for side in "${SIDES[@]}"; do
      echo "+ round $r, $side: coordinator bench --devices cpu --relevance 1000,3000,5000 --repeats 3"
      target/relev-$side/coordinator bench --devices cpu --relevance 1000,3000,5000 --repeats 3 \
        --log warn >"$OUT/$side-$r.json"
    done
  done
  for side in "${SIDES[@]}"; do
    echo "+ $side: coordinator bench --devices cpu --relevance 10000 --repeats 1"
    target/relev-$side/coordinator bench --devices cpu --relevance 10000 --repeats 1 --log warn \
      >"$OUT/$side-10000.json"
  done
  uptime
} 2>&1 | tee "$OUT/run.log"
