#!/usr/bin/env bash
# Issue 27's GPU figures not yet taken, in one command of at most ~9 minutes: the device-side half
# of bench-results/gpu-cohort/<date>-next. Run on the GPU machine from the repository root (BIN,
# DATA, OUT and the set-up: scripts/gpu-env.sh; DEV, default vulkan, lets the script be tried on a
# machine without a GPU with DEV=cpu). Results in $OUT (default bench-results/gpu-cohort/local):
#   gpu.txt        nvidia-smi's name, driver and memory; the host's CPU
#   simulate.txt   each run's command, final line and wall time (bash's `time`):
#                  fedavg label:2, 100 clients, 100 %, 3 rounds, E = 1 on $DEV with an empty
#                  CubeCL cache, CubeCL's default tuning, then CUBECL_AUTOTUNE_LEVEL=minimal
#                  (each cold), and on the host's CPU: every round's evaluation is the stacked
#                  one on a GPU (`cohort::evaluate_cohort`), one model at a time on the CPU, so
#                  the final lines compare the two; then stocfl rotate:4, 100 clients, 100 %,
#                  E = 10, up to 50 rounds within 90 s (BENCHMARKS §9's StoCFL run) on $DEV
#   relevance-cpu.json, relevance-$DEV-<clients>.json
#                  MT-HFL's server-side relevance rows (`coordinator bench --relevance`, k = 5):
#                  1 000 clients on the host's CPU; 1 000, 3 000 and 10 000 on $DEV
#   log.txt        everything the commands logged (each round's time, each shape tuned)
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-cohort/local
DEV=${DEV:-vulkan}
: >"$OUT/simulate.txt"
fedavg=(--algorithm fedavg --partition label:2 --clients 100 --frac 1 --rounds 3 --epochs 1)
stocfl=(--algorithm stocfl --tau 0.5 --mu 0.05 --partition rotate:4 --clients 100 --frac 1
    --rounds 50 --epochs 10 --batch 10 --lr 0.01 --momentum 0.5)
run timeout 30 "$BIN" bench --devices cpu --relevance 1000 --repeats 1 \
    >"$OUT/relevance-cpu.json" 2>>"$log"
# One process per count: CubeCL tunes each new shape (up to half a minute on the H200), and a
# count that runs out of time loses only its own figure.
for n in 1000 3000 10000; do
    run timeout 60 "$BIN" bench --devices "$DEV" --relevance "$n" --repeats 3 \
        >"$OUT/relevance-$DEV-$n.json" 2>>"$log"
done
rm -rf target/environment
sim fedavg-default "$DEV" 120 "${fedavg[@]}"
rm -rf target/environment
echo "+ CUBECL_AUTOTUNE_LEVEL=minimal" >>"$OUT/simulate.txt"
CUBECL_AUTOTUNE_LEVEL=minimal sim fedavg-minimal "$DEV" 100 "${fedavg[@]}"
sim fedavg cpu 30 "${fedavg[@]}"
sim stocfl-50 "$DEV" 90 "${stocfl[@]}"
