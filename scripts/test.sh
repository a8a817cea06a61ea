#!/usr/bin/env bash
# The whole test suite (what CI runs). Usage: scripts/test.sh [lint|test]
#   lint   rustfmt's check, clippy over every target with the GPU and AVX-512 code compiled in, and
#          the no_std build
#   test   cargo test over the workspace
# Without an argument: both, in that order. (.ci/run runs the two apart, to build the aarch64
# edge client beside the lints.)
set -euo pipefail
cd "$(dirname "$0")/.."
phase=${1:-all}
case "$phase" in
  all | lint | test) ;;
  *) echo "usage: scripts/test.sh [lint|test]" >&2; exit 2 ;;
esac
if [ "$phase" != test ]; then
  cargo fmt --all -- --check
  # Lints with the GPU backend's code and the `avx512` build compiled in (no GPU is needed to
  # type-check it), so that the `vulkan` paths, the `avx512` build and shared/tests/gpu_backends.rs
  # cannot rot unseen; one check pass for all.
  cargo clippy --workspace --all-targets --features vulkan,avx512 -- -D warnings
  # The protocol module without std, on a bare-metal target when it is installed.
  if rustup target list --installed 2>/dev/null | grep -q thumbv7em-none-eabihf; then
    cargo build -q -p edgecfl-shared --no-default-features --target thumbv7em-none-eabihf
  else
    cargo build -q -p edgecfl-shared --no-default-features
  fi
fi
if [ "$phase" != lint ]; then
  cargo test --workspace --no-fail-fast 2>&1
fi
