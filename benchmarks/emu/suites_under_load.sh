#!/usr/bin/env bash
# The emulator and demo suites two at a time on this machine, round after round for SECONDS_TOTAL seconds
# (default 420): load-dependent failures show here before CI. One summary line per pytest run; the log of a
# failed run is kept as FAIL_<round>_<n>.log in OUT.
# Usage: AUTOCCL_LIB_DIR=build/rel/lib OUT=/tmp/hunt bash benchmarks/emu/suites_under_load.sh [SECONDS_TOTAL]
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/suites_under_load}
mkdir -p "$OUT"
end=$((SECONDS + ${1:-420}))
round=0
while [ $SECONDS -lt $end ]; do
  round=$((round + 1))
  for n in 1 2; do
    PYTHONPATH=python timeout 600 python3 -m pytest -q tests/emu tests/demo -p no:randomly -p no:cacheprovider \
      > "$OUT/run_$n.log" 2>&1 &
  done
  wait
  for n in 1 2; do
    echo "round $round.$n: $(tail -1 "$OUT/run_$n.log")" | tee -a "$OUT/summary.txt"
    grep -q "failed" "$OUT/run_$n.log" && cp "$OUT/run_$n.log" "$OUT/FAIL_${round}_$n.log"
  done
done
