#!/usr/bin/env bash
# The method comparison of BENCHMARKS.md §9 (issue 10 §4): every method on the partitions its
# paper uses, with the paper's settings where it gives them. Each run writes
# bench-results/experiments/<grid>/<name>/{summary.json,rounds.csv,clusters.json,*.svg}; runs whose
# summary.json already has every round are skipped, so the script resumes. Then
# `python3 scripts/experiments-report.py` prints the tables and draws the per-grid plots.
#
# Usage: [ROUNDS=50] [FULL_ROUNDS=10] [SEED=0] [TAUS="0.5 0.7"] [FRACS="0.1 1"] [PARTS="pairs"]
#        [BIN=coordinator] [DEVICE=cpu] [JOBS=1] [RESULTS=dir] scripts/experiments.sh [GRID...]
#   BIN     the coordinator to run (default: `cargo build --release -p coordinator` first, then
#           target/release/coordinator); e.g. one built with `--features vulkan` on a GPU machine
#   DEVICE  every run's `--device` (default: the binary's own default, the CPU)
#   JOBS    runs at once (default 1): with more, each run's output goes to its <out>/log.txt and
#           one line says when it ends; a failed run stops new ones and fails the script
#   RESULTS the runs' root folder (default bench-results/experiments, the committed runs)
#   grids: adacfl (AdaCFL Table 2/3: dominant:0.5/0.8/1, pairs, or PARTS; AdaCFL vs FedAvg, CFL, IFCA)
#          stocfl (rotate:4, shift:4 at 10 % and 100 % sampling, or FRACS; StoCFL vs FedAvg, FedProx, IFCA;
#                  100 % sampling runs FULL_ROUNDS rounds: 10 rounds of 100 clients are twice the
#                  client updates of 50 rounds of 10)
#          tau    (StoCFL's τ sweep on the 2 rotations × 4 label groups product)
#          fesem  (dir:0.5: FeSEM K = 2, 3, 4 vs FedAvg and FedProx μ = 0.1)
#          all    (every method on label:2, label:3, dir:0.1 with FedClust's settings)
#          cifar10 (FedClust's Tables 1-2, CIFAR-10 column: Local, FedAvg, FedProx, IFCA, CFL, PACFL,
#                  FedClust, and MT-HFL on the raw pixels, on label:2, label:3, dir:0.1 (or PARTS),
#                  FedClust's settings, the colour LeNet-5; CIFAR10=DIR names the data (default: ../shared/data/cifar10-jpg's
#                  tarball, extracted once under target/cifar10-jpg)
#          mnist  (the MNIST settings of three papers, each method against FedAvg on the same split:
#                  AdaCFL's (MnistCNN, batch 100, all clients, 1 epoch) on pairs (α = B) or PARTS;
#                  StoCFL's rotated MNIST (rotate:4, 10 % sampled, 5 epochs); FeSEM's dir:0.5
#                  (K = 4); MNIST=DIR names the IDX files (default ../shared/data/mnist)
#   default: all five Fashion-MNIST grids (not cifar10, not mnist). A full run of everything is many hours on 2 cores.
set -euo pipefail
# The whole script is one block, read before it runs: editing this file while a long run goes
# on cannot change or break the running copy.
{
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-50}
FULL_ROUNDS=${FULL_ROUNDS:-10}
SEED=${SEED:-0}
grids=("$@"); [ ${#grids[@]} -gt 0 ] || grids=(adacfl stocfl tau fesem all)
JOBS=${JOBS:-1}
RESULTS=${RESULTS:-bench-results/experiments}
if [ -n "${BIN:-}" ]; then
  bin=$BIN
else
  cargo build --release -q -p coordinator
  bin=target/release/coordinator
fi
device=(); [ -z "${DEVICE:-}" ] || device=(--device "$DEVICE")
# With JOBS > 1: the runs that failed, one name a line.
failed=$(mktemp); trap 'rm -f "$failed"' EXIT

# run GRID NAME ARGS...: one simulate run of $rounds rounds unless it is already complete; with
# JOBS > 1 in the background, once fewer than JOBS runs are going.
rounds=$ROUNDS
run() {
  local grid=$1 name=$2; shift 2
  local out="$RESULTS/$grid/$name"
  if [ -f "$out/summary.json" ] && python3 - "$out/summary.json" "$rounds" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if len(s["accuracy_per_round"]) >= int(sys.argv[2]) else 1)
PY
  then echo "== $grid/$name: done"; return; fi
  local cmd=("$bin" simulate --clients 100 --rounds "$rounds" --seed "$SEED" --out "$out" "${device[@]}" "$@")
  if [ "$JOBS" -le 1 ]; then
    echo "== $grid/$name: $*"
    "${cmd[@]}"
    return
  fi
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n || true; done
  if [ -s "$failed" ]; then
    echo "== failed: $(paste -sd' ' "$failed"); no new runs, waiting for those going" >&2
    wait
    exit 1
  fi
  mkdir -p "$out"
  echo "== $grid/$name: $* (output: $out/log.txt)"
  (
    SECONDS=0
    if "${cmd[@]}" >"$out/log.txt" 2>&1; then
      echo "== $grid/$name: ended after ${SECONDS} s: $(tail -1 "$out/log.txt")"
    else
      echo "== $grid/$name: FAILED after ${SECONDS} s, see $out/log.txt" >&2
      echo "$grid/$name" >>"$failed"
    fi
  ) &
}

# FedClust's FMNIST settings (GUIDE §2).
fedclust_settings=(--frac 0.1 --epochs 10 --batch 10 --lr 0.01 --momentum 0.5)
# AdaCFL's: 1 local epoch, batch 150, lr 0.01 (plain SGD), all clients every round.
adacfl_settings=(--frac 1 --epochs 1 --batch 150 --lr 0.01 --momentum 0)

for grid in "${grids[@]}"; do
  case $grid in
    adacfl)
      for p in ${PARTS:-dominant:0.5 dominant:0.8 dominant:1 pairs}; do
        k=5; [ "$p" = pairs ] && k=10
        n=${p/:/-}
        run adacfl "$n-adacfl" --algorithm adacfl --partition "$p" --lambda 1.4 --epsilon 1.8 "${adacfl_settings[@]}"
        # The paper's λ against the automatic cut on the same round-0 uploads.
        run adacfl "$n-adacfl-auto" --algorithm adacfl --partition "$p" --lambda auto --epsilon 1.8 "${adacfl_settings[@]}"
        run adacfl "$n-fedavg" --algorithm fedavg --partition "$p" "${adacfl_settings[@]}"
        run adacfl "$n-cfl" --algorithm cfl --partition "$p" "${adacfl_settings[@]}"
        run adacfl "$n-ifca" --algorithm ifca --clusters "$k" --partition "$p" "${adacfl_settings[@]}"
      done ;;
    stocfl)
      for p in rotate:4 shift:4; do
        for f in ${FRACS:-0.1 1}; do
          n="${p/:/-}-f$f"
          rounds=$ROUNDS; [ "$f" = 1 ] && rounds=$FULL_ROUNDS
          s=(--frac "$f" --epochs 5 --batch 10 --lr 0.01 --momentum 0.5 --partition "$p")
          run stocfl "$n-stocfl" --algorithm stocfl --tau 0.5 --mu 0.05 "${s[@]}"
          run stocfl "$n-fedavg" --algorithm fedavg "${s[@]}"
          run stocfl "$n-fedprox" --algorithm fedprox --mu 0.01 "${s[@]}"
          run stocfl "$n-ifca" --algorithm ifca --clusters 4 "${s[@]}"
        done
      done
      rounds=$ROUNDS ;;
    tau)
      for t in ${TAUS:-0.5 0.7 0.85 0.9 0.95 0.97 0.98 0.99}; do
        run tau "tau-$t" --algorithm stocfl --tau "$t" --mu 0.05 --partition 'rotate:2*groups:012-34-56-789' \
          --frac 0.1 --epochs 5 --batch 10 --lr 0.01 --momentum 0.5
      done ;;
    fesem)
      s=(--partition dir:0.5 --frac 0.1 --epochs 5 --batch 10 --lr 0.01 --momentum 0.5)
      for k in 2 3 4; do run fesem "fesem-k$k" --algorithm fesem --clusters "$k" --mu 0.1 "${s[@]}"; done
      run fesem fedavg --algorithm fedavg "${s[@]}"
      run fesem fedprox --algorithm fedprox --mu 0.1 "${s[@]}"
      ;;
    all)
      for p in label:2 label:3 dir:0.1; do
        n=${p/:/-}
        for a in fedclust fedavg local fedprox adacfl stocfl cfl; do
          run all "$n-$a" --algorithm "$a" --partition "$p" "${fedclust_settings[@]}"
        done
        run all "$n-fesem" --algorithm fesem --clusters 4 --partition "$p" "${fedclust_settings[@]}"
        run all "$n-ifca" --algorithm ifca --clusters 4 --partition "$p" "${fedclust_settings[@]}"
        run all "$n-mthfl" --algorithm mthfl --partition "$p" "${fedclust_settings[@]}"
      done ;;
    cifar10)
      data=${CIFAR10:-}
      if [ -z "$data" ]; then
        data=target/cifar10-jpg
        if [ ! -d "$data/train" ]; then
          mkdir -p "$data"
          tar -xzf ../shared/data/cifar10-jpg/cifar10-jpg.tar.gz -C "$data"
        fi
      fi
      s=(--dataset cifar10 --data "$data" "${fedclust_settings[@]}")
      for p in ${PARTS:-label:2 label:3 dir:0.1}; do
        n=${p/:/-}
        run cifar10 "$n-fedclust" --algorithm fedclust --partition "$p" "${s[@]}"
        # PACFL's own script for CIFAR-10 (MMorafah/PACFL scripts/pacfl.sh): 3 basis vectors,
        # cut at 4.9 degrees, its "average" linkage (WPGMA, scipy's `weighted`).
        run cifar10 "$n-pacfl" --algorithm pacfl --pacfl-basis 3 --lambda 4.9 --linkage weighted \
          --partition "$p" "${s[@]}"
        for a in fedavg local fedprox cfl; do
          run cifar10 "$n-$a" --algorithm "$a" --partition "$p" "${s[@]}"
        done
        run cifar10 "$n-ifca" --algorithm ifca --clusters 4 --partition "$p" "${s[@]}"
        # MT-HFL's CIFAR-10 runs cluster ImageNet-pretrained ResNet-18 features, which cannot be
        # had here: its Gram signatures on the raw pixels (its FMNIST mode), 3 072 × 3 072.
        run cifar10 "$n-mthfl" --algorithm mthfl --partition "$p" "${s[@]}"
      done ;;
    mnist)
      m=(--dataset mnist --data "${MNIST:-../shared/data/mnist}")
      # AdaCFL §6.1: MnistCNN, batch 100, lr 0.01, 1 local epoch; its λ and ε.
      a=("${m[@]}" --model mnist-cnn --frac 1 --epochs 1 --batch 100 --lr 0.01 --momentum 0)
      for p in ${PARTS:-pairs}; do
        n=${p/:/-}
        run mnist "adacfl-$n-adacfl" --algorithm adacfl --partition "$p" --lambda 1.4 --epsilon 1.8 "${a[@]}"
        run mnist "adacfl-$n-adacfl-auto" --algorithm adacfl --partition "$p" --lambda auto --epsilon 1.8 "${a[@]}"
        run mnist "adacfl-$n-fedavg" --algorithm fedavg --partition "$p" "${a[@]}"
      done
      # StoCFL's rotated MNIST (its Table 1; 100 clients here, not its 2 400 of 100 samples).
      s=("${m[@]}" --partition rotate:4 --frac 0.1 --epochs 5 --batch 10 --lr 0.01 --momentum 0.5)
      run mnist stocfl-rotate-4-stocfl --algorithm stocfl --tau 0.5 --mu 0.05 "${s[@]}"
      run mnist stocfl-rotate-4-fedavg --algorithm fedavg "${s[@]}"
      # FeSEM's Dirichlet(0.5) split.
      s=("${m[@]}" --partition dir:0.5 --frac 0.1 --epochs 5 --batch 10 --lr 0.01 --momentum 0.5)
      run mnist fesem-dir-0.5-fesem --algorithm fesem --clusters 4 --mu 0.1 "${s[@]}"
      run mnist fesem-dir-0.5-fedavg --algorithm fedavg "${s[@]}"
      ;;
    *) echo "unknown grid $grid (adacfl stocfl tau fesem all cifar10 mnist)" >&2; exit 2 ;;
  esac
done
wait
[ ! -s "$failed" ] || { echo "== failed: $(paste -sd' ' "$failed")" >&2; exit 1; }
python3 scripts/experiments-report.py "$RESULTS"
exit
}
