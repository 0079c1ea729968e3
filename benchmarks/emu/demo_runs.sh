#!/usr/bin/env bash
# The default `autoccl demo` N times (default 8): per run the total gain, the tasks with a gain and the latest
# convergence call (the demo's ranks are threads, so runs differ).
# Usage: AUTOCCL_LIB_DIR=build/rel/lib bash benchmarks/emu/demo_runs.sh [N]
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$(mktemp -d)
for i in $(seq 1 "${1:-8}"); do
  rm -rf "$out/demo"
  PYTHONPATH=python python3 -m autoccl.cli demo -o "$out/demo" > /dev/null
  python3 - "$out/demo/results.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
gains = [f"{t['coll']} {t['bytes'] >> 20} MiB {100 * t['gain']:+.1f} % {t['tuned_config']}" for t in d["tasks"] if t["gain"]]
conv = max(t["converged_at"] or 10**9 for t in d["tasks"])
print(f"all tasks {100 * d['total_gain']:+.1f} %; last converged at call {conv}; " + "; ".join(gains))
PY
done
rm -rf "$out"
