#!/usr/bin/env bash
# The edge client's training with flex's default matrix-product kernels (AVX2+FMA) against the
# `avx512` build (gemm's AVX-512 kernels), beside PyTorch on the CPU, in one run on an idle
# x86-64 machine with AVX-512; then the same with PyTorch capped at AVX2, which tells how much
# of PyTorch's lead at batch 64 is its vector width.
# Needs PyTorch (here 2.9.0 in target/torch-venv: scripts/bench-throughput.py says how) and
#   cargo build --release -p edge-client && mkdir -p target/default && cp target/release/edge-client target/default/
#   cargo build --release -p edge-client --features avx512
# Usage: bench-results/throughput/x86-avx512/run.sh
# Elsewhere, e.g. on a GPU host's Xeon pinned to two cores with its own PyTorch:
#   CLIENT=.bin/edge-client-avx512 BASELINE=.bin/edge-client TORCH_PY=python3 DATA=.fmnist \
#   PIN="taskset -c 2,3" OUT=bench-results/throughput/xeon-avx512 bench-results/throughput/x86-avx512/run.sh
# AVX2_PASS=0 leaves out the second pass (PyTorch capped at AVX2).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=${OUT:-bench-results/throughput/x86-avx512}
CLIENT=${CLIENT:-target/release/edge-client}
BASELINE=${BASELINE:-target/default/edge-client}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
export TORCH_PY=${TORCH_PY:-target/torch-venv/bin/python3}
# shellcheck disable=SC2206
PIN=(${PIN:-})
mkdir -p "$OUT/torch-native"
common=(--client "$CLIENT" --baseline "$BASELINE" --data "$DATA" --rounds 5 --repeats 5)
"${PIN[@]}" python3 scripts/bench-throughput.py "${common[@]}" --out "$OUT/torch-native" \
  | tee "$OUT/torch-native/run.log"
[ "${AVX2_PASS:-1}" = 1 ] || exit 0
mkdir -p "$OUT/torch-avx2"
ATEN_CPU_CAPABILITY=avx2 DNNL_MAX_CPU_ISA=AVX2 "${PIN[@]}" python3 scripts/bench-throughput.py \
  "${common[@]}" --models lenet5 --out "$OUT/torch-avx2" | tee "$OUT/torch-avx2/run.log"
