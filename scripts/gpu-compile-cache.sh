#!/usr/bin/env bash
# CubeCL's compilation cache, off and on, on a GPU host (issue 27): since it was turned on
# (`train::Backend::device`, `keep_compiled_kernels`), a `vulkan` or `cuda` process reads the
# kernels an earlier process compiled instead of compiling them again. Run on the GPU machine from
# the repository root (BIN, DATA, OUT and the set-up: scripts/gpu-env.sh). FedAvg, label:2, 100
# clients, 100 % sampling, 3 rounds, E = 1 on vulkan: one untimed run first (it tunes the shapes
# and fills both caches), then alternately with the compilation cache off (a `burn.toml` at the
# repository root with `[cubecl.compilation] cache = false`, which CubeCL reads and the
# coordinator leaves to decide) and on (no such file), twice each. At most ~4 minutes (the sum of
# the timeouts). Results in $OUT (default bench-results/gpu-compile-cache/local):
#   gpu.txt        nvidia-smi's name, driver and memory; the host's CPU
#   simulate.txt   each run's setting, command, final line and wall time (bash's `time`)
#   log.txt        everything the runs logged: each round's time (`round N: … Xs`)
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-compile-cache/local
if [ -e burn.toml ] || [ -e cubecl.toml ]; then
    echo "a burn.toml or cubecl.toml is already here: this script writes its own" >&2
    exit 1
fi
: >"$OUT/simulate.txt"
fedavg=(--algorithm fedavg --partition label:2 --clients 100 --frac 1 --rounds 3 --epochs 1)
echo "+ warm-up, not a figure" >>"$OUT/simulate.txt"
sim warm-up vulkan 90 "${fedavg[@]}"
for pass in 1 2; do
    for cache in off on; do
        if [ "$cache" = off ]; then
            printf '[cubecl.compilation]\ncache = false\n' >burn.toml
        else
            rm -f burn.toml
        fi
        echo "+ compilation cache $cache" >>"$OUT/simulate.txt"
        sim "fedavg-$cache-$pass" vulkan 40 "${fedavg[@]}"
    done
done
rm -f burn.toml
