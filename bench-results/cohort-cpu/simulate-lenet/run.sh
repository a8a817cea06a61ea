#!/usr/bin/env bash
# Issue 27's CPU target, LeNet-5: `coordinator simulate` with one client per core (`--cohort 1`,
# the threaded path) against cohorts (`--cohort C`), FedAvg and FedClust, label:2, 100 clients,
# 10 % and 100 % sampling, the two sides alternated R times on the idle machine; then, in the same
# run, one model's training rate at growing batch sizes on one thread (what a cohort of batch-10
# clients can at best approach) and the bench's cohort/alone rates.
# Prints one line a run; keeps each configuration's last summary.json and rounds.csv under $OUT
# (stderr's warnings in $OUT/warnings.log).
# Usage: [R=2] [C=10] [OUT=bench-results/cohort-cpu/simulate-lenet] bench-results/cohort-cpu/simulate-lenet/run.sh
set -euo pipefail
cd "$(dirname "$0")/../../.."
R=${R:-2}
C=${C:-10}
OUT=${OUT:-bench-results/cohort-cpu/simulate-lenet}
BIN=${BIN:-target/release/coordinator}
echo "# $(git rev-parse --short HEAD), $(nproc) cores, load: $(cut -d' ' -f1-3 /proc/loadavg)"
for algo in fedavg fedclust; do
  for frac in 1 0.1; do
    args=(simulate --algorithm "$algo" --partition label:2 --clients 100 --frac "$frac"
          --rounds 3 --epochs 2 --seed 0 --log warn)
    for i in $(seq "$R"); do
      for cohort in 1 "$C"; do
        dir=$OUT/$algo-frac$frac-cohort$cohort
        start=$(date +%s.%N)
        line=$("$BIN" "${args[@]}" --cohort "$cohort" --out "$dir" 2>>"$OUT/warnings.log" | tail -1)
        end=$(date +%s.%N)
        # Keep what compares the two sides' results (the models and plots are megabytes).
        find "$dir" -type f ! -name summary.json ! -name rounds.csv -delete
        printf '%s frac %s --cohort %s run %s: %.2f s; %s\n' "$algo" "$frac" "$cohort" "$i" \
          "$(echo "$end - $start" | bc)" "${line%%; results*}"
      done
    done
  done
done
for b in 10 32 64 100; do
  "$BIN" bench --devices cpu --cohorts 1 --batch "$b" --samples 1000 --repeats 3 --log warn \
    > "$OUT/one-model-batch$b.json"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1]))[0]; print(f'one model, batch {sys.argv[2]}, 1 thread: {r[\"samples_per_second\"]:.0f} samples/s')" \
    "$OUT/one-model-batch$b.json" "$b"
done
"$BIN" bench --devices cpu --cohorts 1,"$C",100 --samples 300 --repeats 3 --alone --log warn > "$OUT/cohorts.json"
python3 -c "
import json,sys
for r in json.load(open(sys.argv[1])):
    print(f\"bench {r['mode']}: {r['clients']} clients, {r['threads']} thread(s): {r['samples_per_second']:.0f} samples/s\")" "$OUT/cohorts.json"
echo "# load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
