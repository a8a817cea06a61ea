#!/usr/bin/env bash
# Runs the tests that assert on a run's logs N times each (default 50) and records every
# outcome: a test that fails at random is a defect of the suite (issue 25 §0).
#
# Usage: [N=50] scripts/repeat-tests.sh [OUT]   (OUT default bench-results/repeated-tests)
# Writes OUT/results.txt: one line per run (test, attempt, ok|FAILED, seconds), then a summary;
# the log of a failed attempt is kept as OUT/failed-TEST-ATTEMPT.log.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-50}
out=${1:-bench-results/repeated-tests}
mkdir -p "$out"
# (test binary of the `edgecfl-tests` package, test name)
tests=(
  "system embedded_broker_run_recovers_groups_and_equals_simulate"
  "logging json_lines_on_stderr"
  "logging filter_hides_lower_levels"
)
cargo test -q -p edgecfl-tests --test system --test logging --no-run
results="$out/results.txt"
{
  echo "# scripts/repeat-tests.sh, N=$n, commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
  echo "# $(nproc) cores; test attempt outcome seconds"
} > "$results"
for t in "${tests[@]}"; do
  set -- $t
  fails=0
  for i in $(seq 1 "$n"); do
    start=$(date +%s.%N)
    if cargo test -q -p edgecfl-tests --test "$1" -- --exact "$2" > "$out/current.log" 2>&1; then
      outcome=ok
    else
      outcome=FAILED
      fails=$((fails + 1))
      cp "$out/current.log" "$out/failed-$2-$i.log"
    fi
    awk -v t="$2" -v i="$i" -v o="$outcome" -v s="$start" -v e="$(date +%s.%N)" \
      'BEGIN { printf "%s %d %s %.1f\n", t, i, o, e - s }' >> "$results"
  done
  echo "summary: $2: $((n - fails)) passed, $fails failed of $n" | tee -a "$results"
done
rm -f "$out/current.log"
