#!/usr/bin/env bash
# The whole test suite (what CI runs). Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
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
cargo test --workspace --no-fail-fast 2>&1
