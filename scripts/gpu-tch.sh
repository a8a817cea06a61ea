#!/usr/bin/env bash
# Issue 27's figures through burn-tch on a CUDA GPU (libtorch's kernels: cuDNN's grouped
# convolutions, cuBLAS's batched matrix products), in one command of at most ~8.5 minutes (the
# sum of its timeouts). Run on the GPU machine from the repository root, with PyTorch in its
# python3: BIN, default .bin/coordinator-tch, is a release `coordinator` built with
# `--features tch` against a pip PyTorch of the host's version (the recipe:
# bench-results/gpu-tch/README.md); it loads the host's libtorch from torch's own lib/ folder.
# DATA, OUT and the rest as scripts/gpu-env.sh (no .gl needed); without a DATA directory the
# benches train on the bundled subset and the `simulate` runs fail. BEFORE (optional, default
# .bin/coordinator-tch-before): the same build before a cohort's steps sent their inputs 100
# steps at a time (489277d); when present, its cohorts run too. DEV, default tch:cuda:0, and
# TORCH_DEVICE, default cuda, let the script be tried without a GPU.
# Results in $OUT (default bench-results/gpu-tch/local):
#   gpu.txt                  nvidia-smi's name, driver and memory; the host's CPU; torch's version
#   cohort-tch.json          coordinator bench --devices $DEV --cohorts 1,10,100,400 --batch 10
#                            --samples 600 --repeats 3 --convolutions grouped,im2col
#   cohort-tch-before.json   the same with BEFORE, when present
#   torch-vmap.jsonl         the PyTorch peer (scripts/torch_cohort_bench.py): the same clients
#                            and batch, vmap(grad), eager
#   one-model-tch.json       coordinator bench --devices $DEV --cohorts 1 --alone --batch 1000
#                            --samples 8000 --repeats 3 (one model: `alone` is train_local)
#   torch-one-model.jsonl    scripts/torch_cohort_bench.py --plain --batch 1000
#   simulate.txt             each run's command, final line and wall time (bash's `time`):
#                            fedavg label:2, 100 clients, 100 %, 3 rounds, E = 1 on $DEV and on
#                            the host's CPU; stocfl rotate:4, 100 clients, 100 %, E = 10, up to
#                            50 rounds within 90 s on $DEV (BENCHMARKS §9's StoCFL run)
#   log.txt                  everything the commands logged, each command's exit code
set -uo pipefail
BIN=${BIN:-.bin/coordinator-tch}
source scripts/gpu-env.sh bench-results/gpu-tch/local
DEV=${DEV:-tch:cuda:0}
TORCH_DEVICE=${TORCH_DEVICE:-cuda}
BEFORE=${BEFORE:-.bin/coordinator-tch-before}
torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))')
export LD_LIBRARY_PATH=$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)' \
    >>"$OUT/gpu.txt" 2>&1
data=()
[ -d "$DATA" ] && data=(--data "$DATA")
bench() {
    local limit=$1 out=$2 bin=$3
    shift 3
    run timeout "$limit" "$bin" bench --devices "$DEV" "$@" "${data[@]}" >"$OUT/$out" 2>>"$log"
    echo "rc $?" >>"$log"
}
torch_peer() {
    local limit=$1 out=$2
    shift 2
    run timeout "$limit" python3 scripts/torch_cohort_bench.py --device "$TORCH_DEVICE" "$@" \
        >"$OUT/$out" 2>>"$log"
    echo "rc $?" >>"$log"
}
cohort=(--cohorts 1,10,100,400 --batch 10 --samples 600 --repeats 3
    --convolutions grouped,im2col)
bench 120 cohort-tch.json "$BIN" "${cohort[@]}"
[ -x "$BEFORE" ] && bench 90 cohort-tch-before.json "$BEFORE" "${cohort[@]}"
torch_peer 45 torch-vmap.jsonl --clients 1,10,100,400 --batch 10
bench 45 one-model-tch.json "$BIN" --cohorts 1 --alone --batch 1000 --samples 8000 --repeats 3
torch_peer 30 torch-one-model.jsonl --plain --batch 1000
: >"$OUT/simulate.txt"
fedavg=(--algorithm fedavg --partition label:2 --clients 100 --frac 1 --rounds 3 --epochs 1)
stocfl=(--algorithm stocfl --tau 0.5 --mu 0.05 --partition rotate:4 --clients 100 --frac 1
    --rounds 50 --epochs 10 --batch 10 --lr 0.01 --momentum 0.5)
sim fedavg "$DEV" 45 "${fedavg[@]}"
sim fedavg cpu 25 "${fedavg[@]}"
sim stocfl-50 "$DEV" 90 "${stocfl[@]}"
