#!/usr/bin/env bash
# CubeCL's autotuning on a GPU host (issue 27): what a `simulate` costs the first time a machine
# sees its kernel shapes (every shape tuned), and again with the tuning read back from the
# persistent cache that the `vulkan` feature turns on (`burn/persistence`: under target/environment
# of the enclosing Cargo workspace, else the user's cache directory, ~/.cache/cubecl). Run on the
# GPU machine from the repository root (BIN, DATA, OUT and the set-up: scripts/gpu-env.sh).
# Results in $OUT (default bench-results/gpu-autotune/local):
#   gpu.txt        nvidia-smi's name, driver and memory; the host's CPU
#   simulate.txt   fedclust label:2, 100 clients, 10 %, 3 rounds, E = 2 on the host's CPU, then on
#                  vulkan with an empty cache (cold), then again (warm); the same for stocfl
#                  rotate:4, 100 %, 2 rounds, E = 5; each timed by bash's `time`, with its final
#                  line
#   log.txt        everything the commands logged (each round's time, each shape tuned)
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-autotune/local
rm -rf target/environment
: >"$OUT/simulate.txt"
fedclust=(--algorithm fedclust --partition label:2 --clients 100 --frac 0.1 --rounds 3 --epochs 2)
stocfl=(--algorithm stocfl --tau 0.5 --mu 0.05 --partition rotate:4 --clients 100 --frac 1
    --rounds 2 --epochs 5 --batch 10 --lr 0.01 --momentum 0.5)
sim fedclust cpu 60 "${fedclust[@]}"
sim fedclust-cold vulkan 90 "${fedclust[@]}"
sim fedclust-warm vulkan 60 "${fedclust[@]}"
sim stocfl cpu 90 "${stocfl[@]}"
sim stocfl-cold vulkan 150 "${stocfl[@]}"
sim stocfl-warm vulkan 80 "${stocfl[@]}"
du -sh target/environment >>"$OUT/simulate.txt" 2>&1
