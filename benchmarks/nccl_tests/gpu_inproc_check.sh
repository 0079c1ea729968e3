#!/usr/bin/env bash
# GPU check: one process driving all GPUs (nccl-tests -g N) under online mode, scored by the slowest
# rank's kernel (AUTOCCL_INPROC_SCORE=slowest, the default) and by the authority's own kernel (=own), on
# communicators of NCCL's own channel count (no --channel-ceiling) and once on 64-channel ones, against plain
# NCCL with the same iteration counts; two repetitions, all five collectives 1 MiB-1 GiB with data checking
# (-c 1) and every rank's decisions compared from the traces. Then one process per GPU (online with 64-channel
# communicators vs plain) in the same call. Everything is packed into results.tgz / logs.tgz.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_inproc_check.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
export AUTOCCL_CACHE_DIR=/tmp/autoccl-cache   # removed before every online run: each starts untuned
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --warmup 200 --iters 40"
left() { echo $(( ${CALL_LIMIT_S:-570} - SECONDS )); }
# variant NAME CEILING SCORE: one online sweep of the five collectives, one process for all GPUs
variant() {
  rm -rf "$AUTOCCL_CACHE_DIR"
  AUTOCCL_INPROC_SCORE=$3 $S --plan online --launch single --online-ceiling "$2" --keep-traces "/tmp/traces/$1" \
    --logdir "/tmp/ntlogs/$1" --out "/tmp/res/single_$1.jsonl" --budget-s "$(left)"
}
mkdir -p /tmp/res
for rep in 1 2; do
  echo "== repetition $rep (${SECONDS} s)"
  $S --plan plain-long --launch single --logdir /tmp/ntlogs/plain$rep --out /tmp/res/single_plain.jsonl --budget-s "$(left)"
  variant "slowest_nceil$rep" 0 slowest
  variant "own_nceil$rep" 0 own
  [ "$rep" = 1 ] && variant "slowest_ceil64_$rep" 64 slowest
done
echo "== one process per GPU (${SECONDS} s)"
$S --plan plain-long --launch mpi --logdir /tmp/ntlogs/mpiplain --out /tmp/res/mpi_plain.jsonl --budget-s "$(( $(left) - 60 ))"
rm -rf "$AUTOCCL_CACHE_DIR"
$S --plan online --launch mpi --keep-traces /tmp/traces/mpi --logdir /tmp/ntlogs/mpi --out /tmp/res/mpi_online.jsonl \
  --budget-s "$(( $(left) - 25 ))"
python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces > /tmp/res/pinned.md 2>&1
O=benchmarks/results/h200x4/nccl-tests-ceiling/env-oracle/env_oracle_best.json
for v in slowest_nceil own_nceil slowest_ceil64_; do
  cat /tmp/res/single_${v}*.jsonl > /tmp/res/all_$v.jsonl 2>/dev/null
  python3 benchmarks/nccl_tests/online_report.py /tmp/res/all_$v.jsonl $O --plain /tmp/res/single_plain.jsonl \
    --launch single > "/tmp/res/report_single_$v.md" 2>&1; echo "$v: $(tail -1 /tmp/res/report_single_$v.md)"
done
python3 benchmarks/nccl_tests/online_report.py /tmp/res/mpi_online.jsonl $O --plain /tmp/res/mpi_plain.jsonl --launch mpi \
  > /tmp/res/report_mpi.md 2>&1; echo "mpi: $(tail -1 /tmp/res/report_mpi.md)"
tar -C /tmp -czf "$OUT/results.tgz" res
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
