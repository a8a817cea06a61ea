#!/usr/bin/env bash
# MT-HFL's server-side relevance rows in blocks of up to 2^24 products against tiles of up to
# 2^20 (its temporaries below glibc's mmap threshold), the two coordinators alternating.
# Needs release builds of `coordinator`, the blocks' in target/relev-blocks/ and the tiles' in
# target/relev-tiles/ (`cargo build --release -p coordinator`, each copied there).
# Usage: bench-results/relevance-cpu/tiles/run.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=bench-results/relevance-cpu/tiles SIDES="blocks tiles" \
  exec bench-results/relevance-cpu/pairs-once/run.sh "$@"
