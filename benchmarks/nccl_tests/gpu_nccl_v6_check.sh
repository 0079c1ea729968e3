#!/usr/bin/env bash
# GPU check: the plugin under NCCL 2.30 (tuner v6 with getChunkSize,
# profiler v6) on real GPUs. The image has NCCL 2.28.9 (tuner v5, no chunk size): NCCL 2.30.7 is built
# beforehand from its public source for sm_90 with the kernels nccl-tests' float/sum runs need, and carried
# as GPU_NCCL (default .carry/nccl-2.30.7, unpacked from .carry/nccl-2.30.7.tar.xz when only that is there):
#   make -C <nccl-src> -j src.build BUILDDIR=<dir> NVCC_GENCODE="-gencode=arch=compute_90,code=sm_90" \
#     ONLY_FUNCS="AllGather * *|Broadcast * *|SendRecv|AllReduce Sum (f32|bf16) * *|Reduce Sum (f32|bf16) * *|ReduceScatter Sum (f32|bf16) * *"
# What it does, one process per GPU (nccl-tests' MPI build), data checked (-c 1) in every run:
#  1. which plugin versions NCCL 2.30 loads (NCCL_DEBUG=INFO lines of the tuner and profiler);
#  2. chunk probe: fixed mode ring/simple/64 and ring/ll128/64 with NCCL's chunk and smaller ones (the only
#     direction NCCL 2.30 lets a tuner go: it clamps a larger answer to the buffer's chunk), 4 MiB-1 GiB;
#  3. the cycles check (plain NCCL 2.30 against online mode), REPS=1 unless set, per launch kind in LAUNCHES
#     (default mpi); CHUNK_OFF=1 adds an online run with AUTOCCL_CHUNK=off after each (the same engine
#     without the chunk search), reported on its own against the same plain runs.
# PROBE=0 skips step 2. NCCL_CH=N passes --nccl-channels N to online runs (calls left to NCCL capped at a
# plain communicator's count), NCCL_CH=auto reads it from NCCL's INFO line of a plain run; unset or 0: not
# passed (NCCL's own choice then runs on the 64-channel communicators, as in this script's first runs).
# Usage on the GPU machine, from the repo root: OUT=... bash benchmarks/nccl_tests/gpu_nccl_v6_check.sh
GPU_NCCL=${GPU_NCCL:-.carry/nccl-2.30.7}
if [ ! -d "$GPU_NCCL/lib" ] && [ -f "$GPU_NCCL.tar.xz" ]; then
  tar -C "$(dirname "$GPU_NCCL")" -xJf "$GPU_NCCL.tar.xz" || exit 1
fi
export GPU_NCCL
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
left() { echo $(( ${CALL_LIMIT_S:-560} - SECONDS )); }
AC="python3 -m autoccl"
MPI="mpirun -np $NGPU"
mkdir -p /tmp/res /tmp/probe /tmp/traces

# 1. plugin versions
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING $AC run --mode online --channel-ceiling 64 -- \
  $MPI "$NT_BIN/all_reduce_perf_mpi" -b 4M -e 4M -w 5 -n 5 -c 1 > /tmp/probe/v6_load.log 2>&1
grep -iE "tuner|profiler|autoccl|NCCL version" /tmp/probe/v6_load.log | sort -u | head -40 > /tmp/res/v6_load.txt
echo "== plugin load: $(grep -ciE 'v6' /tmp/res/v6_load.txt) lines naming v6"; cat /tmp/res/v6_load.txt | head -12

# 2. chunk probe (each run: 4M, 16M, 64M, 256M, 1G; the log keeps nccl-tests' table)
probe() {  # tag rule-or-empty coll
  local tag=$1 rule=$2 coll=$3 wrap=()
  [ -n "$rule" ] && wrap=($AC run --mode fixed --fixed "$rule" --channel-ceiling 64 --)
  [ "$(left)" -lt 150 ] && { echo "probe $tag skipped: $(left) s left"; return; }
  timeout 90 "${wrap[@]}" $MPI "$NT_BIN/${coll}_perf_mpi" -b 4M -e 1G -f 4 -w 20 -n 40 -c 1 \
    > "/tmp/probe/${coll}__${tag}.log" 2>&1 || echo "probe $coll $tag: rc $?"
}
declare -A NAME=([all_gather]=allgather [reduce_scatter]=reducescatter [all_reduce]=allreduce)
[ "${PROBE:-1}" = 1 ] && for coll in all_gather reduce_scatter all_reduce; do
  n=${NAME[$coll]}
  probe plain "" $coll
  for ck in 0 1048576 524288 262144 131072; do
    r="$n:ring/simple/64"; [ $ck != 0 ] && r="$r/chunk=$ck"
    probe "ring_simple_64_chunk$ck" "$r" $coll
  done
  for ck in 0 288000 144000; do
    r="$n:ring/ll128/64"; [ $ck != 0 ] && r="$r/chunk=$ck"
    probe "ring_ll128_64_chunk$ck" "$r" $coll
  done
done
if [ "${PROBE:-1}" = 1 ]; then
  python3 benchmarks/nccl_tests/chunk_probe_report.py /tmp/probe > /tmp/res/chunk_probe.md 2>&1
  cat /tmp/res/chunk_probe.md
fi

# 3. cycles check under NCCL 2.30 (plain and online both on the carried NCCL)
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --warmup 200 --iters 40 --cycles 3"
R=benchmarks/nccl_tests/online_report.py
O=benchmarks/results/h200x4/nccl-tests-ceiling/env-oracle/env_oracle_best.json
COLLS=${COLLS:-all_gather,reduce_scatter,all_reduce}
if [ "${NCCL_CH:-0}" = auto ]; then
  NCCL_CH=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout 60 $MPI "$NT_BIN/all_reduce_perf_mpi" -b 1M -e 1M -w 1 -n 1 \
    2>&1 | grep -oE "[0-9]+ coll channels" | head -1 | cut -d' ' -f1)
fi
NCCL_CH=${NCCL_CH:-0}
echo "online runs: --channel-ceiling 64, --nccl-channels ${NCCL_CH} (0: not passed)" | tee /tmp/res/nccl_channels.txt
for launch in ${LAUNCHES:-mpi}; do
  export AUTOCCL_CACHE_DIR=/tmp/cache-$launch
  for rep in $(seq 1 "${REPS:-1}"); do
    [ "$(left)" -lt 120 ] && { echo "cycles $launch $rep skipped: $(left) s left"; break; }
    echo "== cycles $launch rep $rep (${SECONDS} s)"
    $S --plan plain-long --launch $launch --colls $COLLS --logdir /tmp/ntlogs/$launch-plain$rep \
      --out /tmp/res/${launch}_plain.jsonl --budget-s "$(( ($(left) - 20) / 2 ))"
    variants="online"; [ "${CHUNK_OFF:-0}" = 1 ] && variants="online chunkoff"
    for v in $variants; do
      rm -rf "$AUTOCCL_CACHE_DIR"
      env_v=(); [ $v = chunkoff ] && env_v=(env AUTOCCL_CHUNK=off)
      "${env_v[@]}" $S --plan online --launch $launch --colls $COLLS --online-ceiling 64 --online-nccl-channels "$NCCL_CH" \
        --keep-traces /tmp/traces/$launch-$v$rep --logdir /tmp/ntlogs/$launch-$v$rep \
        --out /tmp/res/${launch}_$v.jsonl --budget-s "$(( $(left) - 20 ))"
    done
  done
  for v in online chunkoff; do
    [ -s /tmp/res/${launch}_$v.jsonl ] || continue
    python3 $R /tmp/res/${launch}_$v.jsonl $O --plain /tmp/res/${launch}_plain.jsonl --launch $launch \
      --cycle last > /tmp/res/report_${launch}_${v}_cycle-last.md 2>&1
    echo "$launch $v cycle last: $(tail -1 /tmp/res/report_${launch}_${v}_cycle-last.md)"
  done
done
python3 -c "
import sys, glob; sys.path.insert(0, 'benchmarks/nccl_tests'); import sweep
print('[online] cross-rank', sweep.cross_rank_agreement(glob.glob('/tmp/traces/*/*.jsonl')))"
[ -d /tmp/traces ] && python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces > /tmp/res/pinned.md 2>&1
tar -C /tmp -czf "$OUT/results.tgz" res
tar -C /tmp -czf "$OUT/logs.tgz" probe ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
