#!/usr/bin/env bash
# Benchmark 1 of BENCHMARKS.md: FedClust vs FedAvg vs Local on Fashion-MNIST with FedClust's
# settings (100 clients, frac 0.1, E = 10, B = 10, lr 0.01, momentum 0.5).
# Usage: [ALGS="fedclust fedavg local"] scripts/bench-fedclust.sh [ROUNDS] [PARTITIONS...]
#        (default: 50 label:2 label:3 dir:0.1)
# Results: bench-results/fedclust/<partition>-<algorithm>/{summary.json,rounds.csv,clusters.json}
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-50}; shift || true
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(label:2 label:3 dir:0.1)
cargo build --release -q -p coordinator
for p in "${parts[@]}"; do
  for a in ${ALGS:-fedclust fedavg local}; do
    out="bench-results/fedclust/${p/:/-}-$a"
    echo "== $p $a → $out"
    target/release/coordinator simulate --algorithm "$a" --partition "$p" --clients 100 \
      --frac 0.1 --rounds "$rounds" --epochs 10 --batch 10 --lr 0.01 --momentum 0.5 \
      --seed 0 --out "$out"
  done
done
