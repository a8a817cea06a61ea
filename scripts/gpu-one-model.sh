#!/usr/bin/env bash
# Issue 27's one-model figure on a GPU, in one command of at most ~7 minutes: one LeNet-5 trained
# on its own (`train_local`: the edge client's path and that of the jobs that do not train in
# cohorts) at batch 1 000, by the coordinator before and after a training call kept its shard on
# the device and read its loss once per epoch (BEFORE, default .bin/coordinator-before: a release
# build of 75f15e3; BIN, default .bin/coordinator: a build with the change; both
# `--features vulkan`), the two alternating, twice; then PyTorch eager, one model, on the same GPU.
# Run on the GPU machine from the repository root; DATA, OUT and the set-up as scripts/gpu-env.sh,
# except that without a DATA directory the bench trains on the bundled subset (3 000 images, each
# client's 8 000 samples wrapping around: two binaries and Fashion-MNIST exceed the 64 MiB a device
# call carries). DEV, default vulkan, and TORCH_DEVICE, default cuda, let the script be tried
# without a GPU.
# Results in $OUT (default bench-results/gpu-one-model/local):
#   gpu.txt                  nvidia-smi's name, driver and memory; the host's CPU
#   <side>-<pass>.json       coordinator bench --devices $DEV --cohorts 1 --alone --batch 1000
#                            --samples 8000 --repeats 3 (`alone`: train_local; `cohort`: a cohort
#                            of one), side = before | after, pass = 1 | 2
#   torch-one-model.jsonl    python3 scripts/torch_cohort_bench.py --plain --batch 1000
#   log.txt                  everything the commands logged, each command's exit code
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-one-model/local
DEV=${DEV:-vulkan}
TORCH_DEVICE=${TORCH_DEVICE:-cuda}
BEFORE=${BEFORE:-.bin/coordinator-before}
SAMPLES=${SAMPLES:-8000}
# The first run tunes every kernel shape of batch 1 000 (CubeCL's cache, shared by both binaries:
# the same kernels); the runs after it find them tuned.
limit=150
data=()
[ -d "$DATA" ] && data=(--data "$DATA")
for pass in 1 2; do
    for side in before after; do
        bin=$BIN
        [ "$side" = before ] && bin=$BEFORE
        run timeout "$limit" "$bin" bench --devices "$DEV" --cohorts 1 --alone --batch 1000 \
            --samples "$SAMPLES" --repeats 3 "${data[@]}" >"$OUT/$side-$pass.json" 2>>"$log"
        echo "rc $?" >>"$log"
        limit=60
    done
done
run timeout 60 python3 scripts/torch_cohort_bench.py --device "$TORCH_DEVICE" --plain \
    --batch 1000 >"$OUT/torch-one-model.jsonl" 2>>"$log"
echo "rc $?" >>"$log"
