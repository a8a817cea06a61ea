#!/usr/bin/env bash
# The cohort's steps sending their inputs 100 steps at a time (6d153d8) against each step sending
# its own (489277d), on the CPU (flex): throughput and results, the two release `coordinator`
# builds alternating. Run from the repository root on an idle machine:
#   bench-results/cohort-cpu/step-inputs/run.sh BEFORE_BIN AFTER_BIN
# Writes, beside this script:
#   bench-<side>-<pass>.json  coordinator bench --devices cpu --cohorts 10,100 --samples 300
#                             --repeats 3 (LeNet-5, batch 10; cohorts only), pass 1 and 2
#   mlp-<side>-<pass>.json    the same with --model mlp --cohorts 10,50 --samples 600
#   simulate/                 scripts/bench-simulate-ab.sh with the runs below, 2 repeats: runs.tsv
#                             (wall seconds, final line) and each run's summary.json, rounds.csv
#   mlp50-alternating.tsv     the MLP's cohort of 50 alone, five passes (its spread is the widest)
set -euo pipefail
before=$1 after=$2
here=$(dirname "$0")
data=${EDGECFL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
for pass in 1 2; do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    "$bin" bench --devices cpu --cohorts 10,100 --samples 300 --repeats 3 --data "$data" \
      >"$here/bench-$side-$pass.json" 2>/dev/null
    "$bin" bench --model mlp --devices cpu --cohorts 10,50 --samples 600 --repeats 3 \
      --data "$data" >"$here/mlp-$side-$pass.json" 2>/dev/null
  done
done
lenet=" --partition label:2 --clients 100 --epochs 2 --seed 0 --cohort 10"
CONFIGS="fedavg-100-cohort10|--algorithm fedavg --frac 1 --rounds 2$lenet
fedclust-10-cohort10|--algorithm fedclust --frac 0.1 --rounds 3$lenet
fedprox-100-cohort10|--algorithm fedprox --mu 0.01 --frac 1 --rounds 2$lenet
mthfl-mlp|--algorithm mthfl --model mlp --partition tasks:fmnist3 --clients 30 --rounds 3 --epochs 2 --frac 1 --lambda k=3 --seed 1" \
  scripts/bench-simulate-ab.sh "$before" "$after" "$here/simulate" 2
out=$here/mlp50-alternating.tsv
printf 'pass\tbinary\tsamples_per_second\n' >"$out"
for pass in 1 2 3 4 5; do
  for side in before after; do
    bin=$before
    [ "$side" = after ] && bin=$after
    v=$("$bin" bench --model mlp --devices cpu --cohorts 50 --samples 600 --repeats 3 --data "$data" \
      2>/dev/null | python3 -c "import json, sys; print(round(json.load(sys.stdin)[0]['samples_per_second']))")
    printf '%s\t%s\t%s\n' "$pass" "$side" "$v" >>"$out"
  done
done
