#!/usr/bin/env bash
# Cohort training on a GPU host, larger cohorts and a longer run (issue 27): the device-side half
# of bench-results/gpu-cohort/<date>-fusion. Run on the GPU machine from the repository root
# (BIN, DATA, OUT and the set-up: scripts/gpu-env.sh; PyTorch in python3). Results in $OUT
# (default bench-results/gpu-cohort/local):
#   gpu.txt              nvidia-smi's name, driver and memory; the host's CPU
#   cohort-vulkan.json   coordinator bench --devices vulkan: C = 10, 100, 400 clients × 600
#                        samples, batch 10, one batched cohort (the device's own convolutions)
#   torch-vmap.jsonl     the PyTorch peer (scripts/torch_cohort_bench.py): the same C and batch
#   simulate.txt         FedAvg label:2, 100 clients, 100 %, 10 rounds, E = 2 on vulkan (a cold
#                        process: the training shapes tuned by the bench, the evaluation shapes
#                        not), on vulkan again (every shape read from CubeCL's cache), and on the
#                        host's CPU (one client per core), each timed by bash's `time`, with its
#                        final line
#   log.txt              everything the commands logged (each round's time, each shape tuned)
set -uo pipefail
source scripts/gpu-env.sh bench-results/gpu-cohort/local
cohorts 150 10,100,400
: >"$OUT/simulate.txt"
fedavg=(--algorithm fedavg --partition label:2 --clients 100 --frac 1 --rounds 10 --epochs 2)
sim fedavg vulkan 100 "${fedavg[@]}"
sim fedavg-again vulkan 60 "${fedavg[@]}"
sim fedavg cpu 100 "${fedavg[@]}"
