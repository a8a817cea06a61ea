#!/usr/bin/env bash
# Builds and exercises the GPU backends (cargo features vulkan, tch, cuda; issue 5, hardware.md
# "GPU backends"). Each feature builds in its own target directory ($GPU_TARGET_ROOT/<feature>,
# default target/<feature>), so the default build is never disturbed; CI never runs this.
#
# Usage: [LABEL=name] [PROFILE=dev|release] [GPU_TARGET_ROOT=dir] [TORCH_VENV=dir] [SAMPLES=200]
#        [BENCH=1] scripts/gpu-backends.sh [vulkan] [tch] [cuda]      (default: vulkan tch)
#
# Per feature:
#   1. builds edge-client + coordinator with the feature, the check (shared/examples/gpu_check.rs)
#      and the feature-gated test (shared/tests/gpu_backends.rs);
#   2. a binary built with the feature, asked for a device it lacks, must fail with the typed
#      "rebuild with the cargo feature" error (no panic);
#   3. runs the test, then gpu_check on the CPU and on every device of the feature this machine
#      has (vulkan: wgpu's default adapter — Mesa's lavapipe without a GPU; tch: libtorch's CPU,
#      plus tch:cuda:0 when nvidia-smi sees a GPU; cuda: cuda:0): a few LeNet-5 training steps and
#      MT-HFL's server-side relevance/distance matrix, compared with the CPU's;
#   4. with BENCH=1, `edge-client bench --devices cpu,<device>` (samples/s at batch 10 and 64).
# Results: bench-results/gpu-backends/$LABEL/ (environment.txt, <feature>-*.{txt,json}).
#
# tch: needs PyTorch 2.9.0 importable by `python3` (TORCH_VENV=a venv with `pip install
# torch==2.9.0`); builds with LIBTORCH_USE_PYTORCH=1 and runs with LD_LIBRARY_PATH=<torch>/lib.
# cuda: its build downloads an LLVM bundle (cubecl-llvm / tracel-llvm-bundler): internet needed.
set -euo pipefail
cd "$(dirname "$0")/.."
features=("$@"); [ ${#features[@]} -gt 0 ] || features=(vulkan tch)
label=${LABEL:-local}
profile=${PROFILE:-dev}
root=${GPU_TARGET_ROOT:-target}
samples=${SAMPLES:-200}
out=bench-results/gpu-backends/$label
mkdir -p "$out"
dir=debug; [ "$profile" = dev ] || dir=$profile
cargo_=(nice -n 10 cargo)

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- shared edge-client coordinator || echo ' (+ uncommitted changes)')"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(nproc) cores; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "rustc: $(rustc --version)"
  echo "profile: $profile"
  if command -v nvidia-smi > /dev/null; then
    echo "nvidia-smi: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -3 | tr '\n' ';')"
  else
    echo "nvidia-smi: not found (no NVIDIA GPU driver on this machine)"
  fi
  if command -v vulkaninfo > /dev/null; then
    echo "vulkan devices (vulkaninfo --summary):"
    vulkaninfo --summary 2>/dev/null | grep -E 'deviceType|deviceName|driverName|driverInfo' | sed 's/^/  /' || echo "  none"
  else
    echo "vulkaninfo: not installed"
  fi
} > "$out/environment.txt"
cat "$out/environment.txt"

for f in "${features[@]}"; do
  case $f in vulkan|tch|cuda) ;; *) echo "unknown feature $f (vulkan | tch | cuda)"; exit 2;; esac
  env_=()
  devices=()
  missing=cuda
  case $f in
    vulkan) devices=(vulkan) ;;
    tch)
      [ -z "${TORCH_VENV:-}" ] || export PATH=$TORCH_VENV/bin:$PATH
      torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))') \
        || { echo "tch: python3 cannot import torch (pip install torch==2.9.0, or set TORCH_VENV)"; exit 1; }
      echo "tch: torch $(python3 -c 'import torch; print(torch.__version__)') at $torch_lib" | tee "$out/tch-torch.txt"
      env_=(env LIBTORCH_USE_PYTORCH=1 "LD_LIBRARY_PATH=$torch_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
      devices=(tch)
      if command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1; then devices+=(tch:cuda:0); fi
      missing=vulkan ;;
    cuda) devices=(cuda:0) ;;
  esac
  target=$root/$f
  bin=$target/$dir
  log=$out/$f-log.txt
  : > "$log"
  echo "== $f: building in $target (profile $profile)" | tee -a "$log"
  start=$(date +%s)
  # One feature set for the binaries, the example and the test: with another (e.g. `-p
  # edgecfl-shared --features $f`) cargo rebuilds the whole GPU stack a second time.
  feats=(--workspace --features "edgecfl-shared/$f,edge-client/$f,coordinator/$f")
  "${env_[@]}" "${cargo_[@]}" build --profile "$profile" --target-dir "$target" "${feats[@]}" \
    --bins --example gpu_check 2>&1 | tail -3 | tee -a "$log"
  echo "build: $(( $(date +%s) - start )) s; edge-client $(stat -c %s "$bin/edge-client") bytes (unstripped, $profile)" | tee -a "$log"

  echo "== $f: a device this build lacks gives the typed error" | tee -a "$log"
  if "${env_[@]}" "$bin/edge-client" bench --devices "$missing" --samples 10 --repeats 1 >> "$log" 2> "$out/$f-missing.txt"; then
    echo "edge-client --device $missing unexpectedly succeeded"; exit 1
  fi
  cat "$out/$f-missing.txt" | tee -a "$log"
  grep -q "rebuild with the cargo feature \`$missing\`" "$out/$f-missing.txt"
  if grep -q panicked "$out/$f-missing.txt"; then echo "it panicked"; exit 1; fi

  echo "== $f: test (shared/tests/gpu_backends.rs)" | tee -a "$log"
  "${env_[@]}" "${cargo_[@]}" test --profile "$profile" --target-dir "$target" "${feats[@]}" \
    --test gpu_backends -- --nocapture 2>&1 | sed -E '/^ *(Compiling|Running|Finished)/d' | tee -a "$log"

  for d in "${devices[@]}"; do
    echo "== $f: gpu_check cpu,$d" | tee -a "$log"
    safe=${d//:/-}
    "${env_[@]}" "$bin/examples/gpu_check" --devices "cpu,$d" --samples "$samples" \
      --json "$out/$safe-check.json" 2>&1 >/dev/null | tee -a "$log"
    if [ -n "${BENCH:-}" ]; then
      echo "== $f: edge-client bench --devices cpu,$d" | tee -a "$log"
      "${env_[@]}" "$bin/edge-client" bench --devices "cpu,$d" --batches 10,64 --samples 600 --repeats 3 \
        > "$out/$safe-bench.json" 2> >(tee -a "$log" >&2)
    fi
  done
done
echo "results in $out"
