#!/usr/bin/env bash
# What sets a launch's per-call level at 1 MiB (docs/roadmap.md, "Small messages"): on 2 x H200 every
# one-process nccl-tests launch sat at one of two levels at 1 MiB, about 14 or 21 us a call, in every mode, and
# which level a launch took decided the cell's ratio. This probe runs plain nccl-tests (one process, -g NGPU,
# 1 MiB only, -w 20 -n 400, NT_CYCLES averages a launch) in interleaved rounds, each launch under one of the
# placements in LL_PLACEMENTS, and records every average with the launch, its placement and the CPU the launch's
# main thread ran on last. A placement is `free` (as the benchmarks launch), `cores:A-B` (taskset -c A-B),
# `noaslr` (setarch -R: the same address-space layout every launch) or `noaslr:A-B` (both). Default: free and
# four equal core sets. A placement whose launches hold one level each while free launches take both names
# what sets the level; both levels under one placement rules it out.
#
# On one GPU a communicator has one rank: NCCL copies locally (no tuner, no channels), and in place it does no
# GPU work at all, so the in-place average is NCCL's host path and nccl-tests' loop alone. With LL_CPU_PROBE=1
# each round also runs benchmarks/gpu/probes/cpu_probe.c (no CUDA, no NCCL: a memory, a cache and a core
# latency) under every placement, into cpu-probe.csv: levels there are the machine's.
#
#   OUT=/tmp/out LL_ROUNDS=8 LL_PLACEMENTS="free noaslr cores:4-7" bash benchmarks/gpu/placement_levels.sh
#   python benchmarks/nccl_tests/placement_levels.py $OUT/placement-levels.csv -o benchmarks/results/<kind>/placement-levels
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/gpu/setup.sh || exit 1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
{ lscpu; nvidia-smi topo -m; numactl --hardware 2>/dev/null; } > "$OUT/cpu.txt" 2>&1
ncpu=$(nproc); q=$((ncpu / 4))
placements=(${LL_PLACEMENTS:-free cores:0-$((q - 1)) cores:$q-$((2 * q - 1)) cores:$((2 * q))-$((3 * q - 1)) cores:$((3 * q))-$((ncpu - 1))})
rounds=${LL_ROUNDS:-8}; cycles=${NT_CYCLES:-5}; colls=${LL_COLLS:-all_reduce all_gather}
csv=$OUT/placement-levels.csv
echo "round,coll,placement,launch,cycle,oop_us,ip_us,last_cpu,rc" > "$csv"
if [ "${LL_CPU_PROBE:-0}" = 1 ]; then
  gcc -O2 -o /tmp/cpu_probe benchmarks/gpu/probes/cpu_probe.c || exit 1
  echo "round,placement,launch,mem_ns,l1_ns,muladd_ns" > "$OUT/cpu-probe.csv"
fi
launch=0
for ((r = 0; r < rounds; r++)); do
  # the order of placements rotates every round, so a drift over the run falls on every placement alike
  n=${#placements[@]}
  for ((i = 0; i < n; i++)); do
    p=${placements[$(((i + r) % n))]}
    case $p in
      free) pin=() ;;
      cores:*) pin=(taskset -c "${p#cores:}") ;;
      noaslr) pin=(setarch "$(uname -m)" -R) ;;
      noaslr:*) pin=(setarch "$(uname -m)" -R taskset -c "${p#noaslr:}") ;;
      *) echo "unknown placement $p"; exit 2 ;;
    esac
    if [ "${LL_CPU_PROBE:-0}" = 1 ]; then
      launch=$((launch + 1))
      echo "$r,$p,$launch,$("${pin[@]}" /tmp/cpu_probe 2>/dev/null | tr ' ' ',')" >> "$OUT/cpu-probe.csv"
    fi
    for coll in $colls; do
      launch=$((launch + 1))
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
