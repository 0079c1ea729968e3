#!/usr/bin/env bash
# GPU check: where does one process for 4 GPUs lose its small cells?
# A run of gpu_single_stability.sh (1-16 MiB): reduce_scatter under online64 ran ~55 us per call
# flat over 1-8 MiB in passes where no call was timed and every task was pinned on NCCL's own choice, while
# NCCL alone on the same 64-channel communicators ran ~32 us. This splits the plugin into its parts, each
# REPS times interleaved, nccl-tests -g <every GPU>, SIZES (default -b 1M -e 8M -f 2), -w 200 -n 40 -c 1 -N 3:
#   plain     NCCL alone, its own communicators (what the cycles check compares with)
#   plain64   NCCL alone, 64-channel communicators (NCCL_MIN_CTAS=NCCL_MAX_CTAS=64)
#   tuner64   + our tuner only (NCCL_TUNER_PLUGIN), table mode, empty table: NCCL's own choice every call
#   prof64    + our profiler only (NCCL_PROFILER_PLUGIN), table mode: activation mask 0 every call
#   idle64    + both, table mode, empty table, AUTOCCL_MEASURE_CALLS=0
#   online64  autoccl run --mode online --channel-ceiling 64 (what the cycles calls measure)
#   online64t the same with --trace (what call 1 ran)
#   online64c online64 with --nccl-channels NCCL_CH (default 24): the cycles check's online runs
#   measured64 both, table mode, empty table, AUTOCCL_MEASURE_CALLS=100: NCCL's own choice every call, the
#             first ~100 calls of each task timed, then the mask off for good (does a slowdown outlive timing?)
# Usage on the GPU machine, from the repo root:  OUT=... [REPS=3] [COLLS="reduce_scatter all_gather"] \
#   [VARIANTS="..."] [SIZES="-b 1M -e 8M -f 2"] bash benchmarks/nccl_tests/gpu_overhead_split.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
L=/tmp/osplit; mkdir -p $L/logs $L/traces
LIB=$AUTOCCL_LIB_DIR/libautoccl-nccl.so
C64=(NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64 AUTOCCL_MAX_CHANNELS=64)
TAB=(AUTOCCL_MODE=table AUTOCCL_CACHE_DIR=/tmp/empty-cache AUTOCCL_MEASURE_CALLS=0)
for rep in $(seq 1 "${REPS:-3}"); do
  for coll in ${COLLS:-reduce_scatter all_gather}; do
    for v in ${VARIANTS:-plain64 tuner64 prof64 idle64 online64 online64t}; do
      [ $SECONDS -gt "${CALL_LIMIT_S:-480}" ] && { echo "[$coll $v $rep] skipped: time"; continue; }
      case $v in
        plain) wrap=(env) ;;
        plain64) wrap=(env "${C64[@]}") ;;
        tuner64) wrap=(env "${C64[@]}" "${TAB[@]}" NCCL_TUNER_PLUGIN=$LIB) ;;
        prof64) wrap=(env "${C64[@]}" "${TAB[@]}" NCCL_PROFILER_PLUGIN=$LIB) ;;
        idle64) wrap=(env "${C64[@]}" "${TAB[@]}" NCCL_TUNER_PLUGIN=$LIB NCCL_PROFILER_PLUGIN=$LIB) ;;
        measured64) wrap=(env "${C64[@]}" "${TAB[@]}" NCCL_TUNER_PLUGIN=$LIB NCCL_PROFILER_PLUGIN=$LIB
                          AUTOCCL_MEASURE_CALLS=100 AUTOCCL_TRACE=$L/traces/measured-$coll-$rep) ;;
        online64) wrap=(python3 -m autoccl run --mode online --channel-ceiling 64 --) ;;
        online64t) wrap=(python3 -m autoccl run --mode online --channel-ceiling 64 --trace $L/traces/$coll-$rep --) ;;
        online64c) wrap=(python3 -m autoccl run --mode online --channel-ceiling 64 --nccl-channels "${NCCL_CH:-24}" --) ;;
      esac
      rm -rf /tmp/empty-cache /tmp/ac-cache; t0=$SECONDS
      AUTOCCL_CACHE_DIR=/tmp/ac-cache timeout 120 "${wrap[@]}" \
        $NT_BIN/${coll}_perf ${SIZES:--b 1M -e 8M -f 2} -w 200 -n 40 -c 1 -N 3 -g "$NGPU" > $L/logs/$coll-$v-$rep.log 2>&1
      echo "[$coll $v rep $rep] rc=$? $((SECONDS - t0)) s"
    done
  done
done
python3 benchmarks/nccl_tests/pass_tables.py $L/logs --medians \
  --order plain,plain64,tuner64,prof64,idle64,measured64,online64,online64t,online64c | tee "$OUT/overhead_split.md"
tar -C /tmp -czf "$OUT/osplit.tgz" osplit acbuild.log
echo "total ${SECONDS} s"
