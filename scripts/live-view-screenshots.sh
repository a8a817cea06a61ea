#!/usr/bin/env bash
# Screenshots of the live view (`coordinator demo --http`) for the book (docs/src/live-view.md): runs the browser test
# (tests/live_view.rs: a demo on the bundled data, 8 clients, 10 rounds, the page in headless
# Chromium) and copies the screenshots it took to docs/live-view/. Needs `chromium` and
# `chromium-driver` (Debian; .ci/run installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_INCREMENTAL=0
cargo test -q --workspace --test live_view demo_live_view_in_headless_chromium -- --nocapture
mkdir -p docs/live-view
for f in live-view-training.png live-view-finished.png; do
  cp "target/system-tests/live-view/$f" "docs/live-view/$f"
done
ls -l docs/live-view/*.png
