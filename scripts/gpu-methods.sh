#!/usr/bin/env bash
# Issue 27's "simulate on the GPU faster than on the host's CPU for every method", in one command
# of at most ~8.7 minutes (the sum of its timeouts). Run on the GPU machine from the repository
# root (BIN, DATA, OUT and the set-up: scripts/gpu-env.sh; DEV, default vulkan, lets the script
# be tried on a machine without a GPU with DEV=cpu). Every method of `coordinator simulate` on
# the same run: label:2, 100 clients, 100 % sampling (a cohort of 100 on the GPU), 3 rounds,
# E = 1, FedClust's batch 10, lr 0.01, momentum 0.5, K = 4 where a method takes one; first on
# $DEV (at most 25 s), then on the host's CPU (at most 15 s; StoCFL, which trains two models per
# client, 25 s). Before them one FedAvg run on $DEV
# (at most 60 s, not a figure) fills CubeCL's autotune cache with the cohort's shapes, so that
# the methods' GPU runs are timed as a machine's later runs are (BENCHMARKS §13, "Tuning once per
# machine"); each GPU process still compiles its kernels in its first round.
# Results in $OUT (default bench-results/gpu-methods/local):
#   gpu.txt        nvidia-smi's name, driver and memory; the host's CPU
#   simulate.txt   each run's command, final line and wall time (bash's `time`)
#   log.txt        everything the runs logged: each round's time (`round N: … Xs`), each shape
#                  tuned, each command's exit code
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-methods/local
DEV=${DEV:-vulkan}
: >"$OUT/simulate.txt"
common=(--partition label:2 --clients 100 --frac 1 --rounds 3 --epochs 1 --batch 10 --lr 0.01
    --momentum 0.5)
echo "+ warm-up, not a figure" >>"$OUT/simulate.txt"
sim warm-up "$DEV" 60 --algorithm fedavg "${common[@]}"
for method in fedavg fedprox local fedclust adacfl cfl ifca fesem random stocfl mthfl; do
    own=()
    cpu_limit=15
    case $method in
        ifca | fesem | random) own=(--clusters 4) ;;
        fedprox) own=(--mu 0.01) ;;
        stocfl) cpu_limit=25 ;;
    esac
    sim "$method" "$DEV" 25 --algorithm "$method" "${common[@]}" "${own[@]}"
    sim "$method" cpu "$cpu_limit" --algorithm "$method" "${common[@]}" "${own[@]}"
done
