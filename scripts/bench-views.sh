#!/usr/bin/env bash
# BENCHMARKS.md §11: the two local test views, per-client best accuracy, per-cluster sampling and
# newcomer personalisation, with FedClust's settings (100 clients, E = 10, B = 10, lr 0.01,
# momentum 0.5, seed 0) on full Fashion-MNIST. Every run records both views.
# Usage: scripts/bench-views.sh [RUN...]   (default: every run below; names as in the case)
# Results: bench-results/views/<run>/{summary.json,rounds.csv,clusters.json,accuracy.svg}
# Table:   python3 scripts/bench-views.py
set -euo pipefail
# The whole script is one block, read before it runs: editing this file while a long run goes
# on cannot change or break the running copy.
{
cd "$(dirname "$0")/.."
cargo build --release -q -p coordinator
paper="--clients 100 --batch 10 --lr 0.01 --momentum 0.5 --seed 0"
fl="$paper --frac 0.1 --rounds 50 --epochs 10"
runs=("$@")
[ ${#runs[@]} -gt 0 ] || runs=(dir-0.1-fedavg dir-0.1-local dir-0.1-local-pacfl dir-0.1-fedclust
  label-2-fedclust label-3-fedclust label-2-fedclust-per-cluster label-3-fedclust-per-cluster
  dir-0.1-fedclust-l0.6-per-cluster
  table6-label-2-fedclust table6-label-2-local
  label-3-fedclust-l0.58 label-3-fedclust-l0.65 label-3-fedclust-l0.73
  label-2-fedclust-members label-3-fedclust-members label-3-fedclust-members-per-cluster
  label-2-fedclust-s1 label-2-fedclust-s2 label-3-fedclust-s1 label-3-fedclust-s2
  label-2-fedclust-r200 label-3-fedclust-r200)
for r in "${runs[@]}"; do
  case $r in
    dir-0.1-fedavg) a="--algorithm fedavg --partition dir:0.1 $fl" ;;
    dir-0.1-local) a="--algorithm local --partition dir:0.1 $fl" ;;
    # PACFL's Local script: every client trains every round, one epoch per round.
    dir-0.1-local-pacfl) a="--algorithm local --partition dir:0.1 $paper --frac 1 --rounds 50 --epochs 1" ;;
    dir-0.1-fedclust) a="--algorithm fedclust --partition dir:0.1 $fl" ;;
    label-2-fedclust) a="--algorithm fedclust --partition label:2 $fl" ;;
    label-3-fedclust) a="--algorithm fedclust --partition label:3 $fl" ;;
    # The λ sweep of FedClust's Fig. 4 on label:3 (the automatic cut keeps the 66 label sets;
    # λ = 0.58, 0.65, 0.73 leave 40, 20 and 10 clusters of seed 0's round-0 uploads).
    label-3-fedclust-l*) a="--algorithm fedclust --partition label:3 $fl --lambda ${r##*-l}" ;;
    # Cluster models that start from their members' warmed-up models (a full-model round 0).
    label-2-fedclust-members) a="--algorithm fedclust --partition label:2 $fl --cluster-start members" ;;
    label-3-fedclust-members) a="--algorithm fedclust --partition label:3 $fl --cluster-start members" ;;
    label-3-fedclust-members-per-cluster) a="--algorithm fedclust --partition label:3 $fl --cluster-start members --sampling per-cluster" ;;
    # Seeds 1 and 2 (partition, model, sampling): label-N-fedclust-sS.
    label-[23]-fedclust-s[12]) a="--algorithm fedclust --partition label:${r:6:1} ${fl/--seed 0/--seed ${r: -1}}" ;;
    # The paper's 200 rounds: label-N-fedclust-r200.
    label-[23]-fedclust-r200) a="--algorithm fedclust --partition label:${r:6:1} ${fl/--rounds 50/--rounds 200}" ;;
    label-2-fedclust-per-cluster) a="--algorithm fedclust --partition label:2 $fl --sampling per-cluster" ;;
    label-3-fedclust-per-cluster) a="--algorithm fedclust --partition label:3 $fl --sampling per-cluster" ;;
    dir-0.1-fedclust-l0.6-per-cluster) a="--algorithm fedclust --partition dir:0.1 $fl --lambda 0.6 --sampling per-cluster" ;;
    # FedClust's Table 6: 80 clients federate, 20 join after round 50 and personalise 5 epochs.
    table6-label-2-*) a="--algorithm ${r##*-} --partition label:2 $fl --newcomers 20 --join-round 51 --personalize 5" ;;
    *) echo "unknown run $r" >&2; exit 2 ;;
  esac
  echo "== $r"
  # shellcheck disable=SC2086
  target/release/coordinator simulate $a --out "bench-results/views/$r"
done
exit
}
