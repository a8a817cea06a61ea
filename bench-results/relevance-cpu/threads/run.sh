#!/usr/bin/env bash
# MT-HFL's server-side relevance rows, the tiles on one thread against the tiles on all cores
# (flex), the two coordinators alternating.
# Needs release builds of `coordinator`, the one-thread build's in target/relev-1thread/ and the
# threaded one's in target/relev-threads/ (`cargo build --release -p coordinator`, each copied
# there).
# Usage: bench-results/relevance-cpu/threads/run.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=bench-results/relevance-cpu/threads SIDES="1thread threads" \
  exec bench-results/relevance-cpu/pairs-once/run.sh "$@"
