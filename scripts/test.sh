#!/usr/bin/env bash
# The whole test suite (what CI runs).
#
#   scripts/test.sh [STEP...]
#
# STEP is one or more of (default: lint nostd build test, in that order)
#   lint    clippy over the GPU (`vulkan`) and AVX-512 code: the one crate that holds it,
#           `edgecfl-shared`, type-checked and linted with `--features vulkan,avx512` (no GPU needed)
#   nostd   the wire protocol built without std, for a bare-metal target when it is installed
#   build   the test build of the whole workspace, linted by clippy as it compiles (below)
#   test    every test of the workspace, from that build
#   fuzz    the three fuzzers, for EDGECFL_FUZZ_SECONDS_{WIRE,ROUNDS,GATE} seconds (90, 30, 10)
#
# The workspace's own crates are compiled once, by clippy-driver acting as the compiler
# (RUSTC_WORKSPACE_WRAPPER, as `cargo clippy` runs it, but with code generation): clippy's lints
# with `-D warnings` and the test build in one pass, instead of a separate check pass that would
# compile every dependency a second time. Every cargo command of these steps runs with the same
# variables (exported here, inherited by the tests' nested cargo in tests/util.rs), so none of them
# rebuilds what another built. A plain `cargo test` afterwards rebuilds the workspace's crates
# (not the dependencies) without the lints.
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."

clippy_driver="$(rustc --print sysroot)/bin/clippy-driver"
if [[ ! -x "$clippy_driver" ]]; then
  echo "scripts/test.sh: no clippy-driver at $clippy_driver; install it with: rustup component add clippy" >&2
  exit 1
fi
export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
# What `cargo clippy -- -D warnings` passes to clippy-driver (arguments joined by this separator).
export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"

lint() {
  # Only the crate that has `vulkan`/`avx512` code (shared/src/train.rs, shared/tests/gpu_backends.rs,
  # shared/examples/gpu_check.rs; the other crates only forward the features): checking the whole
  # workspace with them would check tokio, rustls, axum and rumqttd again for nothing. burn-flex's
  # AVX-512 kernels (patches/burn-flex, `x86-v4`) are type-checked with it.
  cargo clippy -p edgecfl-shared --all-targets --features vulkan,avx512 -- -D warnings
}

nostd() {
  if rustup target list --installed 2>/dev/null | grep -q thumbv7em-none-eabihf; then
    cargo build -q -p edgecfl-shared --no-default-features --target thumbv7em-none-eabihf
  else
    cargo build -q -p edgecfl-shared --no-default-features
  fi
}

build() { cargo test --workspace --no-run; }

tests() { cargo test --workspace --no-fail-fast 2>&1; }

fuzz() {
  # `--workspace --test NAME`, not `-p CRATE`: one package alone unifies other features and would
  # build burn twice more. The seed: EDGECFL_FUZZ_SEED, else from the commit.
  local seed=${EDGECFL_FUZZ_SEED:-$((16#$(git rev-parse --short=8 HEAD 2>/dev/null || echo 0)))}
  local name secs
  for name in wire:${EDGECFL_FUZZ_SECONDS_WIRE:-90} rounds:${EDGECFL_FUZZ_SECONDS_ROUNDS:-30} \
    gate:${EDGECFL_FUZZ_SECONDS_GATE:-10}; do
    secs=${name#*:}
    name=fuzz_${name%%:*}
    EDGECFL_FUZZ_SECONDS=$secs EDGECFL_FUZZ_EXECS=1000000000 EDGECFL_FUZZ_SEED=$seed \
      cargo test -q --workspace --test "$name" -- --nocapture 2>&1 |
      grep -E "$name:|test result|panicked"
  done
}

[[ $# -gt 0 ]] || set -- lint nostd build test
for step in "$@"; do
  case "$step" in
    lint) lint ;;
    nostd) nostd ;;
    build) build ;;
    test) tests ;;
    fuzz) fuzz ;;
    *) echo "scripts/test.sh: unknown step '$step' (lint, nostd, build, test, fuzz)" >&2; exit 2 ;;
  esac
done
