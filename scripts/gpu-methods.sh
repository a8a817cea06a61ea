#!/usr/bin/env bash
# Issue 27's "simulate on the GPU faster than on the host's CPU for every method". Run on the GPU
# machine from the repository root (BIN, DATA, OUT and the set-up: scripts/gpu-env.sh; DEV,
# default vulkan, lets the script be tried on a machine without a GPU with DEV=cpu). Every method
# of `coordinator simulate` on the same run: label:2, 100 clients, 100 % sampling (a cohort of 100
# on the GPU), 3 rounds, E = 1, FedClust's batch 10, lr 0.01, momentum 0.5, K = 4 where a method
# takes one. For each method, in turn: one untimed 1-round run on $DEV (at most 60 s, not a
# figure), which fills CubeCL's autotune cache with that method's shapes (its cohorts, its
# evaluations, StoCFL's gradients), so that its timed run is timed as a machine's later runs are
# (BENCHMARKS §13, "Tuning once per machine"; each GPU process still compiles its kernels in its
# first round); then the timed run on $DEV (at most 30 s), then on the host's CPU (at most 15 s;
# StoCFL, which trains two models per client, 25 s). Each method's three runs come one after the
# other, so a run stopped early still leaves whole pairs for the methods before it; the methods
# most worth measuring come first. At most ~19 minutes (the sum of the timeouts); on an H200 with
# an empty autotune cache the first ten methods took 7 minutes (bench-results/gpu-methods/).
# Results in $OUT (default bench-results/gpu-methods/local):
#   gpu.txt        nvidia-smi's name, driver and memory; the host's CPU
#   simulate.txt   each run's command, final line and wall time (bash's `time`)
#   log.txt        everything the runs logged: each round's time (`round N: … Xs`), each shape
#                  tuned, each command's exit code
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-methods/local
DEV=${DEV:-vulkan}
: >"$OUT/simulate.txt"
common=(--partition label:2 --clients 100 --frac 1 --epochs 1 --batch 10 --lr 0.01 --momentum 0.5)
for method in fedavg stocfl ifca fedclust fesem mthfl adacfl cfl fedprox random local; do
    own=()
    cpu_limit=15
    case $method in
        ifca | fesem | random) own=(--clusters 4) ;;
        fedprox) own=(--mu 0.01) ;;
        stocfl) cpu_limit=25 ;;
    esac
    echo "+ warm-up, not a figure" >>"$OUT/simulate.txt"
    sim "$method-warm-up" "$DEV" 60 --algorithm "$method" "${common[@]}" --rounds 1 "${own[@]}"
    sim "$method" "$DEV" 30 --algorithm "$method" "${common[@]}" --rounds 3 "${own[@]}"
    sim "$method" cpu "$cpu_limit" --algorithm "$method" "${common[@]}" --rounds 3 "${own[@]}"
done
