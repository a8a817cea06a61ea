#!/usr/bin/env bash
# Two `coordinator` binaries side by side on `simulate` (issue 27's CPU target: FedAvg and FedClust,
# label:2, 100 clients, 10 % and 100 % sampling), alternating run by run so that both see the
# same machine. Run it on an idle machine; it writes OUT/runs.tsv (one line per run: config,
# binary, repeat, wall seconds, the run's final line) and each run's summary.json and rounds.csv
# under OUT/runs/ (its models and plots are removed).
#
#   scripts/bench-simulate-ab.sh BEFORE_BIN AFTER_BIN OUT [REPEATS]
#   CONFIGS='NAME|simulate ARGS' scripts/bench-simulate-ab.sh ...   (other runs, one per line)
set -euo pipefail
before=$1 after=$2 out=$3 repeats=${4:-3}
data=${EDGECFL_FMNIST_DIR:-/usr/share/datasets/fashion-mnist}
# NAME|ARGS per line; CONFIGS in the environment replaces these four.
lenet=" --partition label:2 --clients 100 --epochs 2 --seed 0"
CONFIGS=${CONFIGS:-"fedavg-10|--algorithm fedavg --frac 0.1 --rounds 3$lenet
fedclust-10|--algorithm fedclust --frac 0.1 --rounds 3$lenet
fedavg-100|--algorithm fedavg --frac 1 --rounds 2$lenet
fedclust-100|--algorithm fedclust --frac 1 --rounds 2$lenet"}
mapfile -t configs <<<"$CONFIGS"
mkdir -p "$out/runs"
printf 'config\tbinary\trepeat\tseconds\tfinal\n' >"$out/runs.tsv"
for r in $(seq 1 "$repeats"); do
  for c in "${configs[@]}"; do
    name=${c%%|*} args=${c#*|}
    for which in before after; do
      bin=$before
      [ "$which" = after ] && bin=$after
      dir="$out/runs/$name-$which-$r"
      rm -rf "$dir"
      t0=$(date +%s.%N)
      # shellcheck disable=SC2086
      final=$("$bin" simulate $args --data "$data" --out "$dir" 2>/dev/null | tail -1)
      t1=$(date +%s.%N)
      find "$dir" -type f ! -name summary.json ! -name rounds.csv -delete
      printf '%s\t%s\t%s\t%.3f\t%s\n' "$name" "$which" "$r" "$(echo "$t1 - $t0" | bc)" "$final" \
        | tee -a "$out/runs.tsv"
    done
  done
done
