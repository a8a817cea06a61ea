#!/usr/bin/env bash
# Runs the tests that assert on a run's logs N times each (default 50) and records every
# outcome: a test that fails at random is a defect of the suite (issue 25 §0).
#
# Usage: [N=50] [FROM=1] [ONLY=REGEX] scripts/repeat-tests.sh [OUT]
#   (OUT default bench-results/repeated-tests; ONLY picks tests by "binary name"; FROM continues
#   the numbering of an earlier, interrupted invocation: attempts FROM..N)
# Appends to OUT/results.txt: a header, one line per run (test, attempt, ok|FAILED, seconds), a
# summary per test of this invocation, then the totals per test over the whole file; the log of a
# failed attempt is kept as OUT/failed-TEST-ATTEMPT.log.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${N:-50}
from=${FROM:-1}
only=${ONLY:-.}
out=${1:-bench-results/repeated-tests}
mkdir -p "$out"
# (test binary of the `edgecfl-tests` package, test name)
tests=(
  "system embedded_broker_run_recovers_groups_and_equals_simulate"
  "logging json_lines_on_stderr"
  "logging filter_hides_lower_levels"
)
# Built once, then the test executables and the workspace's binaries are copied aside and run
# from there (EDGECFL_BIN_DIR, tests/util.rs): edits to the tree during a long loop neither
# rebuild nor change what is being repeated.
snap=$(mktemp -d)
trap 'rm -rf "$snap"' EXIT
cargo test -q --workspace --no-run
exes=$(cargo test -q --workspace --test system --test logging --no-run --message-format=json \
  | grep -o '"executable":"[^"]*/deps/[^"]*"' | cut -d'"' -f4)
for exe in $exes; do
  name=$(basename "$exe"); cp "$exe" "$snap/${name%-*}"
done
# target/<profile>/deps/system-… → target/<profile>, where the binaries are.
bins=$(dirname "$(dirname "$(echo "$exes" | head -1)")")
for b in coordinator edge-client; do cp "$bins/$b" "$snap/$b"; done
ls "$snap"
export EDGECFL_BIN_DIR="$snap"
results="$out/results.txt"
{
  echo "# scripts/repeat-tests.sh, N=$n FROM=$from ONLY=$only, commit $(git rev-parse --short HEAD), $(date -u +%FT%TZ)"
  echo "# $(nproc) cores; test attempt outcome seconds"
} >> "$results"
for t in "${tests[@]}"; do
  echo "$t" | grep -qE -- "$only" || continue
  set -- $t
  fails=0
  for i in $(seq "$from" "$n"); do
    start=$(date +%s.%N)
    if "$snap/$1" --exact "$2" > "$out/current.log" 2>&1; then
      outcome=ok
    else
      outcome=FAILED
      fails=$((fails + 1))
      cp "$out/current.log" "$out/failed-$2-$i.log"
    fi
    awk -v t="$2" -v i="$i" -v o="$outcome" -v s="$start" -v e="$(date +%s.%N)" \
      'BEGIN { printf "%s %d %s %.1f\n", t, i, o, e - s }' >> "$results"
  done
  echo "summary: $2: $((n - from + 1 - fails)) passed, $fails failed of $((n - from + 1))" | tee -a "$results"
done
rm -f "$out/current.log"
# Totals per test over every attempt line in the file (earlier invocations included).
awk '/^[a-z_]+ [0-9]+ (ok|FAILED) / { n[$1]++; if ($3 == "ok") ok[$1]++ }
     END { for (t in n) printf "total: %s: %d of %d attempts ok\n", t, ok[t], n[t] }' "$results" \
  | sort | tee -a "$results"
