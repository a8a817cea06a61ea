#!/usr/bin/env bash
# Benchmark 5 of BENCHMARKS.md: MT-HFL (one-shot clustering on the relevance of the clients'
# Gram-matrix eigenvectors, then LPS/GPS training) against the paper's baseline, random
# clustering into 3 groups under the same LPS/GPS training, on the paper's three-task
# Fashion-MNIST split (tasks:fmnist3, 10 users 5/3/2) with the paper's MLP 784-32-10.
#
# Usage: scripts/bench-mthfl.sh [ROUNDS] [SEEDS]            (default: 30 rounds, 6 seeds)
#        EPOCHS=1 BATCH=32 LR=0.05 ALGS="mthfl random" DATA=/usr/share/datasets/fashion-mnist
# Each seed redraws the partition, the initial model, the client order and the random groups.
# Results: bench-results/mthfl/<algorithm>-seed<S>/{summary.json,rounds.csv,relevance.csv,*.svg}
# Table and per-task curves (mean ± std over seeds): python3 scripts/bench-mthfl-table.py
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-30}
seeds=${2:-6}
target=${CARGO_TARGET_DIR:-target}
data=${DATA:-/usr/share/datasets/fashion-mnist}
cargo build --release -q -p coordinator
for seed in $(seq 0 $((seeds - 1))); do
  for alg in ${ALGS:-mthfl random}; do
    out="bench-results/mthfl/$alg-seed$seed"
    echo "== $alg seed $seed → $out"
    "$target/release/coordinator" simulate --algorithm "$alg" --hierarchy \
      --partition tasks:fmnist3 --clients 10 --model mlp --data "$data" \
      --frac 1 --rounds "$rounds" --epochs "${EPOCHS:-1}" --batch "${BATCH:-32}" \
      --lr "${LR:-0.05}" --momentum 0.5 --lambda k=3 --linkage average \
      --eigenvectors 5 --relevance client --lps-rounds 1 --seed "$seed" --out "$out"
  done
done
