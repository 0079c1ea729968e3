#!/usr/bin/env bash
# GPU call (issue 3): one process driving all GPUs (nccl-tests -g N) under online mode, scored by the slowest
# rank's kernel (AUTOCCL_INPROC_SCORE=slowest, the default since this change) and by the authority's own kernel
# (=own, the previous behaviour), against plain NCCL with the same iteration counts; two repetitions of each,
# interleaved, all five collectives 1 MiB-1 GiB with data checking (-c 1) and every rank's decisions compared
# from the traces. Then one process per GPU (online vs plain) in the same call, for reference.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_inproc_check.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
cmake -S . -B /tmp/acbuild -G Ninja -DCMAKE_BUILD_TYPE=Release -DAUTOCCL_BUILD_PYTHON=OFF -DAUTOCCL_BUILD_TESTS=OFF \
  > /tmp/acbuild.log 2>&1 && cmake --build /tmp/acbuild --target autoccl_nccl -j 16 >> /tmp/acbuild.log 2>&1 \
  || { tail -40 /tmp/acbuild.log; exit 1; }
export AUTOCCL_LIB_DIR=/tmp/acbuild/lib PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export AUTOCCL_CACHE_DIR=/tmp/autoccl-cache   # removed before every online run: each starts untuned
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --warmup 200 --iters 40"
left() { echo $(( ${CALL_LIMIT_S:-570} - SECONDS )); }
for rep in 1 2; do
  echo "== repetition $rep (${SECONDS} s)"
  $S --plan plain-long --launch single --logdir /tmp/ntlogs/plain$rep --out "$OUT/single_plain.jsonl" --budget-s "$(left)"
  rm -rf "$AUTOCCL_CACHE_DIR"
  AUTOCCL_INPROC_SCORE=slowest $S --plan online --launch single --keep-traces /tmp/traces/slowest$rep --logdir /tmp/ntlogs/slowest$rep \
    --out "$OUT/single_slowest.jsonl" --budget-s "$(left)"
  rm -rf "$AUTOCCL_CACHE_DIR"
  AUTOCCL_INPROC_SCORE=own $S --plan online --launch single --keep-traces /tmp/traces/own$rep --logdir /tmp/ntlogs/own$rep \
    --out "$OUT/single_own.jsonl" --budget-s "$(left)"
done
echo "== one process per GPU (${SECONDS} s)"
$S --plan plain-long --launch mpi --logdir /tmp/ntlogs/mpiplain --out "$OUT/mpi_plain.jsonl" --budget-s "$(( $(left) - 60 ))"
rm -rf "$AUTOCCL_CACHE_DIR"
$S --plan online --launch mpi --keep-traces /tmp/traces/mpi --logdir /tmp/ntlogs/mpi --out "$OUT/mpi_online.jsonl" --budget-s "$(( $(left) - 25 ))"
# per online run: the configuration each task ended on (authority's task records in the traces)
python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces > "$OUT/pinned.md" 2>&1
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
