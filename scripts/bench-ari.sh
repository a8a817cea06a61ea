#!/usr/bin/env bash
# Benchmark 2 of BENCHMARKS.md: ARI of FedClust's one-shot clustering (round 0 only) with 100
# clients on partitions with a ground truth, for each linkage and λ rule.
# Usage: [LINKAGES="average complete ward single"] scripts/bench-ari.sh [WARMUP_EPOCHS] [PARTITIONS...]
# Results: one row per run appended to bench-results/ari/ari.csv
set -euo pipefail
cd "$(dirname "$0")/.."
warm=${1:-1}; shift || true
parts=("$@"); [ ${#parts[@]} -gt 0 ] || parts=(groups:012-34-56-789 rotate:4)
cargo build --release -q -p coordinator
mkdir -p bench-results/ari
csv=bench-results/ari/ari.csv
[ -f "$csv" ] || echo "partition,linkage,lambda,warmup_epochs,n_clusters,ari,threshold,wall_seconds" > "$csv"
for p in "${parts[@]}"; do
  for l in ${LINKAGES:-average complete ward single}; do
    for lam in auto k=4; do
      out="bench-results/ari/${p/:/-}-$l-${lam/=/}-w$warm"
      target/release/coordinator simulate --algorithm fedclust --partition "$p" --clients 100 \
        --rounds 0 --warmup-epochs "$warm" --linkage "$l" --lambda "$lam" --seed 0 --out "$out" >/dev/null
      python3 - "$out/summary.json" "$p" "$l" "$lam" "$warm" >> "$csv" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
print(",".join([sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], str(s["n_clusters"]),
                f'{s["ari"]:.4f}', f'{s["threshold"]:.4f}', f'{s["wall_seconds"]:.1f}']))
PY
      tail -1 "$csv"
    done
  done
done
