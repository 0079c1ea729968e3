#!/usr/bin/env bash
# GPU check: why online tuning in one-process-per-GPU runs (mpirun) makes 1-2 MiB all_reduce calls take
# milliseconds during nccl-tests' warm-up (rank 0's kernel times 4-18 ms, calls 24-200, commit 575df83 traces)
# while one process for 4 GPUs does not. Six variants of all_reduce 1-4 MiB, 200 warm-up + 40 timed calls,
# data checked; each with wall time and traces (per-rank kernel times where the mode times them, and each rank's
# segment lookups = waits for the coordinator):
#   plain | online (TCP coordinator, 64-channel comms) | online, NCCL's channels | observe, 64-channel comms
#   (every rank timed, no decision) | fixed ring/ll/23 on 64-channel comms (a forced odd channel count, no
#   coordinator) | online, one process for 4 GPUs.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_mpi_stall.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
export AUTOCCL_CACHE_DIR=/tmp/autoccl-cache
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
ARGS="-b 1M -e 4M -f 2 -n 40 -w 200 -c 1"
MPI="mpirun -np $NGPU $NT_BIN/all_reduce_perf_mpi $ARGS -g 1"
ONE="$NT_BIN/all_reduce_perf $ARGS -g $NGPU"
R="python3 -m autoccl.cli run"
mkdir -p /tmp/st
variant() {  # name, command...
  local name=$1; shift
  rm -rf "$AUTOCCL_CACHE_DIR"
  local t0=$SECONDS s0; s0=$(date +%s.%N)
  timeout 120 "$@" > "/tmp/st/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc wall=$(python3 -c "import time; print(round(time.time() - $s0, 2))") s"
  grep -E "^ +[0-9]+ +[0-9]+ +float" "/tmp/st/$name.log" | awk '{print "   ", $1, "time_us", $6, "wrong", $9}'
}
for rep in 1 2; do
variant plain$rep $MPI
variant online$rep $R --mode online --channel-ceiling 64 --trace /tmp/st/online$rep -- $MPI
variant online_ncclch$rep $R --mode online --trace /tmp/st/online_ncclch$rep -- $MPI
variant observe$rep $R --mode observe --channel-ceiling 64 --trace /tmp/st/observe$rep -- $MPI
variant fixed23_$rep $R --mode fixed --fixed 'allreduce:ring/ll/23' --channel-ceiling 64 --trace /tmp/st/fixed23_$rep -- $MPI
variant single$rep $R --mode online --channel-ceiling 64 --trace /tmp/st/single$rep -- $ONE
done
python3 benchmarks/nccl_tests/stall_summary.py /tmp/st > "$OUT/summary.md" 2>&1
tail -n 80 "$OUT/summary.md"
tar -C /tmp -czf "$OUT/stall.tgz" st acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
