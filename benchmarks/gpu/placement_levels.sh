#!/usr/bin/env bash
# What sets a launch's per-call level at 1 MiB (docs/roadmap.md, "Small messages"): on 2 x H200 every
# one-process nccl-tests launch sat at one of two levels at 1 MiB, about 14 or 21 us a call, in every mode, and
# which level a launch took decided the cell's ratio. This probe runs plain nccl-tests (one process, -g NGPU,
# 1 MiB only, -w 20 -n 400, NT_CYCLES averages a launch) in interleaved rounds, each launch either free (no CPU
# affinity) or pinned with taskset to one of the machine's core sets (LL_SETS, default: the cores in four equal
# sets), and records every average with the launch, its placement and the CPU the launch's main thread ran on
# at its end. Pinned launches holding one level each while free launches take both says the level is where the
# host threads run; both levels under one pinning says it is not.
#
# On one GPU a communicator has one rank: NCCL copies locally (no tuner, no channels), so what is timed is
# NCCL's host path and the launch of a copy: the host-side half of the question.
#
#   OUT=/tmp/out LL_ROUNDS=8 bash benchmarks/gpu/placement_levels.sh
#   python benchmarks/nccl_tests/placement_levels.py $OUT/placement-levels.csv -o benchmarks/results/<kind>/placement-levels
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/gpu/setup.sh || exit 1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
{ lscpu; nvidia-smi topo -m; numactl --hardware 2>/dev/null; } > "$OUT/cpu.txt" 2>&1
ncpu=$(nproc)
if [ -z "${LL_SETS:-}" ]; then
  q=$((ncpu / 4)); LL_SETS="0-$((q - 1)) $q-$((2 * q - 1)) $((2 * q))-$((3 * q - 1)) $((3 * q))-$((ncpu - 1))"
fi
placements=(free $LL_SETS)
rounds=${LL_ROUNDS:-8}; cycles=${NT_CYCLES:-5}; colls=${LL_COLLS:-all_reduce all_gather}
csv=$OUT/placement-levels.csv
echo "round,coll,placement,launch,cycle,oop_us,ip_us,last_cpu,rc" > "$csv"
launch=0
for ((r = 0; r < rounds; r++)); do
  # the order of placements rotates every round, so a drift over the run falls on every placement alike
  n=${#placements[@]}
  for ((i = 0; i < n; i++)); do
    p=${placements[$(((i + r) % n))]}
    for coll in $colls; do
      launch=$((launch + 1))
      pin=(); [ "$p" != free ] && pin=(taskset -c "$p")
      log=/tmp/ll_$launch.log
      # the CPU the main thread ran on last, sampled every 50 ms while the launch runs
      "${pin[@]}" "$NT_BIN/${coll}_perf" -b 1M -e 1M -g "$NGPU" -w 20 -n 400 -N "$cycles" -c 0 > "$log" 2>&1 &
      pid=$!; cpu=-1
      while kill -0 "$pid" 2>/dev/null; do c=$(ps -o psr= -p "$pid" 2>/dev/null | tr -d ' '); [ -n "$c" ] && cpu=$c; sleep 0.05; done
      wait "$pid"; rc=$?
      python3 - "$log" "$r" "$coll" "$p" "$launch" "$cpu" "$rc" >> "$csv" <<'PY'
import sys
from autoccl.bench.nccl_tests import parse_rows
log, r, coll, p, launch, cpu, rc = sys.argv[1:]
rows = parse_rows(open(log, errors="replace").read())
for row in rows:
    print(f"{r},{coll},{p},{launch},{row['cycle']},{row['oop_time_us']},{row['ip_time_us']},{cpu},{rc}")
if not rows:
    print(f"{r},{coll},{p},{launch},-1,,,{cpu},{rc}")
PY
    done
  done
  echo "round $r done at $SECONDS s"
done
tail -n +2 "$csv" | awk -F, '{print $3}' | sort | uniq -c
