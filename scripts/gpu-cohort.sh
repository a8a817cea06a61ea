#!/usr/bin/env bash
# Cohort training on a GPU host (issue 27): the device-side half of bench-results/gpu-cohort/.
# Run on the GPU machine from the repository root (BIN, DATA, OUT and the set-up: scripts/gpu-env.sh;
# Debian's Vulkan loader and libglvnd .debs under .gl/, PyTorch in python3). Results in $OUT
# (default bench-results/gpu-cohort/local):
#   gpu.txt              nvidia-smi's name, driver and memory; the host's CPU
#   cohort-vulkan.json   coordinator bench --devices vulkan: C = 1, 10, 100 clients × 600
#                        samples, batch 10, one batched cohort, its convolutions grouped and
#                        as im2col, side by side
#   torch-vmap.jsonl     the PyTorch peer (scripts/torch_cohort_bench.py): the same C and batch
#   simulate.txt         simulate on vulkan (cohort: all sampled clients) and on the host's CPU
#                        (one client per core), each timed by bash's `time`, with its final line:
#                        fedclust label:2, 100 clients, 10 %, 3 rounds, E = 2; fedavg label:2,
#                        100 %, 2 rounds, E = 1; stocfl rotate:4, 100 %, 2 rounds, E = 5 (the
#                        settings of `FRACS=1 scripts/experiments.sh stocfl`; last, each under
#                        its timeout)
#   log.txt              everything the commands logged (each round's time)
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-cohort/local
cohorts 200 1,10,100 --convolutions grouped,im2col
: >"$OUT/simulate.txt"
fedclust=(--algorithm fedclust --partition label:2 --clients 100 --frac 0.1 --rounds 3 --epochs 2)
fedavg=(--algorithm fedavg --partition label:2 --clients 100 --frac 1 --rounds 2 --epochs 1)
stocfl=(--algorithm stocfl --tau 0.5 --mu 0.05 --partition rotate:4 --clients 100 --frac 1
    --rounds 2 --epochs 5 --batch 10 --lr 0.01 --momentum 0.5)
for dev in vulkan cpu; do sim fedclust $dev 90 "${fedclust[@]}"; done
for dev in vulkan cpu; do sim fedavg $dev 60 "${fedavg[@]}"; done
sim stocfl vulkan 100 "${stocfl[@]}"
sim stocfl cpu 60 "${stocfl[@]}"
