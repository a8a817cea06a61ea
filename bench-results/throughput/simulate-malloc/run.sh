#!/usr/bin/env bash
# `coordinator simulate` with glibc's allocator defaults (BEFORE, a coordinator built from a
# commit before malloc::tune was called there) against the tuned one (AFTER, this checkout's
# target/release/coordinator), alternated R times on the idle machine. Prints one line a run.
# Usage: BEFORE=path/to/old/coordinator [R=3] bench-results/throughput/simulate-malloc/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=${R:-3}
AFTER=target/release/coordinator
out=$(mktemp -d)
for b in 64 10; do
  args=(simulate --algorithm fedavg --partition label:2 --clients 20 --frac 1 --rounds 2
        --epochs 5 --batch "$b" --seed 0 --log warn)
  for i in $(seq "$R"); do
    for side in before after; do
      bin=$BEFORE; [ $side = after ] && bin=$AFTER
      /usr/bin/time -f "$side batch $b run $i: %e s, peak RSS %M KB" \
        "$bin" "${args[@]}" --out "$out/$side-$b" > /dev/null 2> "$out/time"
      tail -1 "$out/time"
    done
    cmp -s <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['accuracy_per_round'])" "$out/before-$b/summary.json") \
           <(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['accuracy_per_round'])" "$out/after-$b/summary.json") \
      || echo "batch $b run $i: accuracy per round differs"
  done
done
rm -rf "$out"
