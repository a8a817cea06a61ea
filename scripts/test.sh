#!/usr/bin/env bash
# The whole test suite (what CI runs). Usage: scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast 2>&1
