#!/usr/bin/env bash
# MT-HFL's server-side relevance rows in blocks of up to 2^24 products against tiles of up to
# 2^20 (its temporaries below glibc's mmap threshold), the two coordinators alternating.
# Needs release builds of `coordinator`, the blocks' in target/relev-blocks/ and the tiles' in
# target/relev-tiles/ (`cargo build --release -p coordinator`, each copied there).
# Usage: bench-results/relevance-cpu/tiles/run.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=bench-results/relevance-cpu/tiles
R=${1:-3}
{
  uptime
  for r in $(seq 1 "$R"); do
    for side in blocks tiles; do
      echo "+ round $r, $side: coordinator bench --devices cpu --relevance 1000,3000,5000 --repeats 3"
      target/relev-$side/coordinator bench --devices cpu --relevance 1000,3000,5000 --repeats 3 \
        --log warn >"$OUT/$side-$r.json"
    done
  done
  for side in blocks tiles; do
    echo "+ $side: coordinator bench --devices cpu --relevance 10000 --repeats 1"
    target/relev-$side/coordinator bench --devices cpu --relevance 10000 --repeats 1 --log warn \
      >"$OUT/$side-10000.json"
  done
  uptime
} 2>&1 | tee "$OUT/run.log"
