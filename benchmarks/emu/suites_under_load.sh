#!/usr/bin/env bash
# Test suites COPIES at a time on this machine, beside BUSY busy loops, round after round for SECONDS_TOTAL seconds
# (default 420) or for ROUNDS rounds: load-dependent failures show here before CI. One summary line per pytest
# run (summary.txt, and the counts in counts.txt); the log of a failed run is kept as FAIL_<round>_<n>.log in OUT.
# TESTS: the pytest arguments (default: the emulator and demo suites).
# Usage: AUTOCCL_LIB_DIR=build/rel/lib OUT=/tmp/hunt bash benchmarks/emu/suites_under_load.sh [SECONDS_TOTAL]
#        TESTS="tests/emu/test_logs.py" COPIES=3 BUSY=4 ROUNDS=8 OUT=/tmp/hunt bash benchmarks/emu/suites_under_load.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/suites_under_load}
TESTS=${TESTS:-tests/emu tests/demo}
COPIES=${COPIES:-2}
BUSY=${BUSY:-0}
ROUNDS=${ROUNDS:-0}
PYTHON=${PYTHON:-python3}
mkdir -p "$OUT"
: > "$OUT/summary.txt"
busy=()
for _ in $(seq 1 "$BUSY"); do
  (while :; do :; done) &
  busy+=($!)
done
trap '[ ${#busy[@]} -eq 0 ] || kill "${busy[@]}" 2>/dev/null' EXIT
end=$((SECONDS + ${1:-420}))
round=0
while { [ "$ROUNDS" -gt 0 ] && [ $round -lt "$ROUNDS" ]; } || { [ "$ROUNDS" -eq 0 ] && [ $SECONDS -lt $end ]; }; do
  round=$((round + 1))
  runs=()
  for n in $(seq 1 "$COPIES"); do
    # shellcheck disable=SC2086  # TESTS is a list of pytest arguments
    PYTHONPATH=python timeout 600 "$PYTHON" -m pytest -q $TESTS -p no:randomly -p no:cacheprovider \
      > "$OUT/run_$n.log" 2>&1 &
    runs+=($!)
  done
  wait "${runs[@]}"
  for n in $(seq 1 "$COPIES"); do
    echo "round $round.$n: $(tail -1 "$OUT/run_$n.log")" | tee -a "$OUT/summary.txt"
    grep -q "failed" "$OUT/run_$n.log" && cp "$OUT/run_$n.log" "$OUT/FAIL_${round}_$n.log"
  done
done
runs=$(wc -l < "$OUT/summary.txt")
failed=$(grep -c "failed" "$OUT/summary.txt")
echo "$runs runs, $failed failed: $TESTS, $COPIES at a time beside $BUSY busy loops" | tee "$OUT/counts.txt"
