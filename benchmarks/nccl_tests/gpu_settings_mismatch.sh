#!/usr/bin/env bash
# GPU check: ranks given different agreed settings must fail clearly, never diverge or hang.
# One process per GPU (MPICH, MPMD), mode online over TCP (`autoccl env --mode online`), all_reduce and
# all_gather 1-64 MiB with data checking (-c 1):
#   same       every rank the same settings: must pass (0 wrong results, exit 0)
#   mismatch   rank 1 alone with AUTOCCL_NCCL_CHANNELS=16: the coordinator refuses its process, its first
#              collective fails with "refused this process"; the job must end (non-zero) within the timeout
# Output per case under $OUT/<case>-<coll>.txt and a summary in $OUT/summary.txt.
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
[ "$NGPU" -ge 2 ] || { echo "needs 2 GPUs"; exit 1; }
ARGS=(-b 1M -e 64M -f 4 -w 20 -n 20 -c 1 -g 1)
for coll in all_reduce all_gather; do
  for case in same mismatch; do
    rm -rf /tmp/cache-mm
    # a fresh coordinator address and token per run
    eval "$(AUTOCCL_CACHE_DIR=/tmp/cache-mm python3 -m autoccl env --mode online)"
    export AUTOCCL_CACHE_DIR=/tmp/cache-mm
    odd=(); [ $case = mismatch ] && odd=(-env AUTOCCL_NCCL_CHANNELS 16)
    rest=$((NGPU - 1))
    t0=$SECONDS
    timeout 120 mpirun -np 1 "$NT_BIN/${coll}_perf_mpi" "${ARGS[@]}" : -np 1 "${odd[@]}" "$NT_BIN/${coll}_perf_mpi" \
      "${ARGS[@]}" $( [ $rest -gt 1 ] && echo ": -np $((rest - 1)) $NT_BIN/${coll}_perf_mpi ${ARGS[*]}" ) \
      > "$OUT/$case-$coll.txt" 2>&1
    rc=$?
    refused=$(grep -c "refused this process" "$OUT/$case-$coll.txt")
    wrong=$(grep -E "^ +[0-9]+ " "$OUT/$case-$coll.txt" | awk '{ if ($9 != "0" || $13 != "0") n++ } END { print n + 0 }')
    echo "$case $coll: rc=$rc (124 = hang) $((SECONDS - t0)) s, 'refused this process' lines $refused, rows with wrong results $wrong" \
      | tee -a "$OUT/summary.txt"
  done
done
