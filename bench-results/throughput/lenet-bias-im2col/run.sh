#!/usr/bin/env bash
# LeNet-5 and MLP training in the edge client after ebab830 (burn-flex patch: the convolution's
# bias gradient summed in place, im2col with bounds checked once per input row) against the edge
# client of the commit before it, 96f0013, beside PyTorch on the CPU, on an idle x86-64 machine:
# first the `avx512` builds, then the default builds, then the `avx512` builds again (PyTorch's
# batch-64 figures moved by a third between the first two passes). Each pass is
# bench-results/throughput/x86-avx512/run.sh (five rounds, the three sides in turn) without its
# AVX2 pass. The four binaries:
#   git worktree add ../edgecfl-96f0013 96f0013
#   for c in 96f0013 c98f063; do  # c98f063 (= ebab830) from this checkout, 96f0013 from the worktree
#     cargo build --release -p edge-client && cp <target>/release/edge-client target/$c/
#     cargo build --release -p edge-client --features avx512 && cp <target>/release/edge-client target/$c-avx512/
#   done
# target/c98f063*: builds of ebab830 (first committed as c98f063, a commit rewritten to drop build
# files committed with it by mistake; the same code, and the name the raw JSON records).
# Usage: bench-results/throughput/lenet-bias-im2col/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
D=bench-results/throughput/lenet-bias-im2col
export AVX2_PASS=0
CLIENT=target/c98f063-avx512/edge-client BASELINE=target/96f0013-avx512/edge-client OUT=$D/avx512 \
  bench-results/throughput/x86-avx512/run.sh
CLIENT=target/c98f063/edge-client BASELINE=target/96f0013/edge-client OUT=$D/default \
  bench-results/throughput/x86-avx512/run.sh
CLIENT=target/c98f063-avx512/edge-client BASELINE=target/96f0013-avx512/edge-client OUT=$D/avx512-again \
  bench-results/throughput/x86-avx512/run.sh
