#!/usr/bin/env bash
# GPU check: is the swing of one process for 4 GPUs at 4 MiB NCCL's or ours?
# A cycles check saw reduce_scatter 4 MiB move 50 -> 97 us per call from pass to pass with unchanged
# configurations, and all_reduce 4 MiB 37-53 us without the plugin on 64-channel communicators. Here each
# variant runs REPS times, interleaved, nccl-tests -g 4 (one process), -b 4M -e 1G -f 4 (the target sizes),
# -w 200 -n 40 -c 1 -N 3; every pass of every run is kept:
#   plain      NCCL alone                          plain64   NCCL alone, 64-channel communicators
#   online64   autoccl run --mode online --channel-ceiling 64 (what the cycles calls measure)
#   online     autoccl run --mode online (NCCL's own channel ceiling)
# Usage on the GPU machine, from the repo root:  OUT=... [REPS=2] [COLLS="reduce_scatter all_reduce"] \
#   [VARIANTS="plain plain64 online64 online"] [SIZES="-b 4M -e 1G -f 4"] bash benchmarks/nccl_tests/gpu_single_stability.sh
# (the small cells: SIZES="-b 1M -e 16M -f 2" for the small cells, where one process loses most.)
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
L=/tmp/stab; mkdir -p $L/logs $L/traces
AC="python3 -m autoccl run --mode online"
declare -A V=(
  [plain]=""
  [plain64]="env NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64"
  [online64]="$AC --channel-ceiling 64 --trace $L/traces/online64"
  [online]="$AC --trace $L/traces/online"
)
ORDER=${VARIANTS:-plain plain64 online64 online}
for rep in $(seq 1 "${REPS:-2}"); do
  for coll in ${COLLS:-reduce_scatter all_reduce}; do
    for v in $ORDER; do
      [ $((SECONDS)) -gt "${CALL_LIMIT_S:-540}" ] && { echo "[$coll $v $rep] skipped: time"; continue; }
      rm -rf /tmp/ac-cache; t0=$SECONDS
      wrap=${V[$v]}
      [ -n "$wrap" ] && [ "${wrap#python3}" != "$wrap" ] && wrap="$wrap-$coll-$rep --"
      AUTOCCL_CACHE_DIR=/tmp/ac-cache timeout 150 $wrap \
        $NT_BIN/${coll}_perf ${SIZES:--b 4M -e 1G -f 4} -w 200 -n 40 -c 1 -N 3 -g 4 > $L/logs/$coll-$v-$rep.log 2>&1
      echo "[$coll $v rep $rep] rc=$? $((SECONDS - t0)) s"
    done
  done
done
python3 benchmarks/nccl_tests/pass_tables.py $L/logs --order "${ORDER// /,}" | tee "$OUT/stability.md"
python3 benchmarks/nccl_tests/pinned_configs.py $L/traces > "$OUT/pinned.md" 2>&1
tar -C /tmp -czf "$OUT/stab.tgz" stab acbuild.log
echo "total ${SECONDS} s"
