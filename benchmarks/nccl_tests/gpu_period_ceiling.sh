#!/usr/bin/env bash
# GPU check. Two questions:
# 1. One process for 4 GPUs, all_reduce 4 MiB: the search pinned tree/ll128/37 (slowest rank's kernel
#    30.6 us vs 57.5 us for NCCL's choice on the 64-channel communicator) yet nccl-tests ran 51-69 us per
#    iteration against plain NCCL's 42.6 us. Is that the GPU waiting for the host (gaps between kernels)
#    or kernels slower back to back than in the search's alternating samples? Each variant forces one
#    configuration; "_t" variants time every call and trace t0_ns (kernel_gaps.py: kernel, gap, period,
#    slowest rank, skew, span), the others run with timing off (what nccl-tests' time means).
# 2. What any per-call configuration (algorithm, protocol, channels) can reach one process per GPU on the
#    15 target cells: the plugin's fixed mode over ring/tree x LL/LL128/Simple x {16,24,32,48,64} channels
#    against plain NCCL with the same counts (oracle_table.py). Budgeted by CALL_LIMIT_S.
# Usage on the GPU machine, from the repo root:  OUT=... CALL_LIMIT_S=540 bash benchmarks/nccl_tests/gpu_period_ceiling.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
left() { echo $(( ${CALL_LIMIT_S:-540} - SECONDS )); }
LIB=$(python3 -c 'from autoccl._paths import plugin_path; print(plugin_path())') || exit 1
L=/tmp/pclogs; T=/tmp/pctraces; mkdir -p $L $T /tmp/res
PLUG="NCCL_TUNER_PLUGIN=$LIB NCCL_PROFILER_PLUGIN=$LIB"
C64="NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64 AUTOCCL_MAX_CHANNELS=64"
OFF="AUTOCCL_MEASURE_CALLS=0"; ALL="AUTOCCL_MEASURE_CALLS=1000000"
fx() { echo "$PLUG $C64 AUTOCCL_MODE=fixed AUTOCCL_FIXED=$1"; }
declare -A V=(
  [plain]=""
  [plain64]="NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64"
  [env_tree37]="NCCL_ALGO=allreduce:tree NCCL_PROTO=allreduce:ll128 NCCL_MIN_CTAS=37 NCCL_MAX_CTAS=37"
  [tree37]="$(fx allreduce:tree/ll128/37) $OFF"
  [tree37_t]="$(fx allreduce:tree/ll128/37) $ALL"
  [ring24]="$(fx allreduce:ring/ll128/24) $OFF"
  [ring24_t]="$(fx allreduce:ring/ll128/24) $ALL"
  [ring64_t]="$(fx allreduce:ring/ll128/64) $ALL"
  [obs_t]="$PLUG AUTOCCL_MODE=observe"
  [obs64_t]="$PLUG $C64 AUTOCCL_MODE=observe"
  [rs49]="$(fx reducescatter:ring/ll128/49) $OFF"
  [rs49_t]="$(fx reducescatter:ring/ll128/49) $ALL"
  [rs24]="$(fx reducescatter:ring/ll128/24) $OFF"
)
# launch:coll:variants
PLAN="single:all_reduce:plain plain64 env_tree37 tree37 tree37_t ring24 ring24_t ring64_t obs_t obs64_t
single:reduce_scatter:plain plain64 rs49 rs49_t rs24 obs_t
mpi:all_reduce:plain tree37 tree37_t ring24 obs_t"
while IFS= read -r line; do
  launch=${line%%:*}; rest=${line#*:}; coll=${rest%%:*}; vars=${rest#*:}
  for v in $vars; do
    name=$launch-$coll-$v
    if [ $launch = single ]; then cmd="$NT_BIN/${coll}_perf -g 4"; else cmd="mpirun -np 4 $NT_BIN/${coll}_perf_mpi -g 1"; fi
    rm -rf /tmp/ac-cache; t0=$SECONDS
    env AUTOCCL_CACHE_DIR=/tmp/ac-cache AUTOCCL_TRACE=$T/$name ${V[$v]} timeout 120 \
      $cmd -b 1M -e 16M -f 4 -w 100 -n 200 -c 1 -N 1 > $L/$name.log 2>&1
    echo "[$name] rc=$? $((SECONDS - t0)) s"
  done
done <<< "$PLAN"
python3 - <<'EOF' > /tmp/res/period.md 2>&1
import sys, glob, os, re
sys.path.insert(0, 'benchmarks/nccl_tests'); import sweep, kernel_gaps
print("nccl-tests out-of-place time (us), -w 100 -n 200 -c 1; '_t' variants time every call (profiler on)\n")
for log in sorted(glob.glob("/tmp/pclogs/*.log")):
    name = os.path.basename(log)[:-4]
    rows = sweep.parse_rows(open(log).read())
    wrong = sum((r["oop_wrong"] or 0) + (r["ip_wrong"] or 0) for r in rows)
    print(f"{name}: " + " ".join(f'{r["bytes"] >> 20}M={r["oop_time_us"]:.1f}' for r in rows) + f" wrong={wrong}")
for name in sorted({re.sub(r"-\d+\.jsonl$|\.jsonl$", "", os.path.basename(p)) for p in glob.glob("/tmp/pctraces/*")}):
    files = glob.glob(f"/tmp/pctraces/{name}*")
    rows = kernel_gaps.summarize(kernel_gaps.load(files))
    if not rows:
        continue
    print(f"\n{name}")
    for r in rows:
        print(f"  {r['coll']} {r['bytes'] >> 20}M {r['config']}: kernel {r['kernel_us']:.1f} gap {r['gap_us']:.1f} "
              f"period {r['period_us']:.1f} slowest {r['slowest_us']:.1f} skew {r['skew_us']:.1f} span {r['span_us']:.1f} (n={r['samples']})")
EOF
cat /tmp/res/period.md
echo "== ceiling, one process per GPU ($(left) s left)"
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --launch mpi --min-bytes 4M --warmup 5 --iters 20 --colls all_gather,reduce_scatter,all_reduce"
$S --plan plain --out /tmp/res/ceiling_plain.jsonl --budget-s "$(left)" | tail -1
$S --plan fixed --channels 16,24,32,48,64 --out /tmp/res/ceiling_fixed.jsonl --budget-s "$(( $(left) - 25 ))" | tail -2
python3 benchmarks/nccl_tests/oracle_table.py /tmp/res/ceiling_fixed.jsonl /tmp/res/ceiling_plain.jsonl --launch mpi \
  --json /tmp/res/ceiling_best.json > /tmp/res/ceiling_best.md 2>&1; tail -5 /tmp/res/ceiling_best.md
tar -C /tmp -czf "$OUT/results.tgz" res
tar -C /tmp -czf "$OUT/logs.tgz" pclogs pctraces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
