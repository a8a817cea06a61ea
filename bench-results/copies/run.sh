#!/usr/bin/env bash
# Honest fleets under the copy guard: round 0 of FedClust, MT-HFL and AdaCFL on real MNIST at 100
# clients (label:2, dir:0.1, iid) and one training round, each client's summary `quarantined` listed.
#   bench-results/copies/run.sh COORDINATOR DATA_DIR
set -euo pipefail
bin=$1 data=$2 out=bench-results/copies
for p in label:2 dir:0.1 iid; do
  for a in fedclust mthfl adacfl; do
    name=$a-${p//:/-}
    "$bin" simulate --algorithm $a --dataset mnist --data "$data" --partition $p --clients 100 \
      --rounds 1 --frac 0.1 --epochs 1 --seed 0 --out "$out/runs/$name" --log warn > "$out/runs/$name.out" 2>&1
    printf '%s\t%s\t%s\t%s\n' "$a" "$p" \
      "$(python3 -c "import json,sys; s=json.load(open('$out/runs/$name/summary.json')); print(len(s.get('quarantined') or []), s.get('n_clusters', s.get('clusters')), sep='\t')")" \
      "$(tail -1 "$out/runs/$name.out")"
  done
done
