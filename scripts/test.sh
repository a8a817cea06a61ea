#!/usr/bin/env bash
# The whole test suite (what CI runs).
#
#   scripts/test.sh [STEP...]
#
# STEP is one or more of (default: lint nostd build test, in that order)
#   lint    clippy over the workspace with the GPU and AVX-512 code compiled in (features
#           `edgecfl-shared/vulkan-backend` and `avx512`; no GPU is needed to type-check it), so
#           that those paths, shared/tests/gpu_backends.rs and burn-flex's AVX-512 kernels cannot
#           rot unseen. `vulkan-backend` is `vulkan` without CubeCL's on-disk caches, whose
#           crates (turso, bindgen, simsimd…) hold none of our code and were half of the lint.
#   nostd   the wire protocol built without std, for a bare-metal target when it is installed
#   build   the test build of the whole workspace
#   test    every test of the workspace, from that build
#   fuzz    the three fuzzers, for EDGECFL_FUZZ_SECONDS_{WIRE,ROUNDS,GATE} seconds (60, 30, 10)
#
# Every step that builds or runs the tests uses the same cargo command line (`--workspace`), so
# none of them rebuilds what another built (tests/util.rs's nested cargo included).
set -euo pipefail
if [[ "${1:-}" == -h || "${1:-}" == --help ]]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
  exit 0
fi
cd "$(dirname "$0")/.."

lint() {
  cargo clippy --workspace --all-targets --features edgecfl-shared/vulkan-backend,avx512 -- -D warnings
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
  for name in wire:${EDGECFL_FUZZ_SECONDS_WIRE:-60} rounds:${EDGECFL_FUZZ_SECONDS_ROUNDS:-30} \
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
