#!/usr/bin/env bash
# GPU check: busbw after tuning, measured with timing off. nccl-tests runs the warm-up of every size
# before timing any, so within one run the last sizes are still being tuned (GPU timing on, process-wide)
# while the first are timed; with one process driving 4 GPUs the profiler's per-call host cost then halves
# small-message busbw. Here: an online run tunes and saves its table (AUTOCCL_CACHE_DIR), then the same
# sweep runs (a) in table mode (the saved configurations, no search) and (b) online again (starts from the
# table). One process for 4 GPUs (NCCL's channel count) and one process per GPU (64-channel communicators),
# all five collectives 1 MiB-1 GiB, -c 1, against plain NCCL of the same launch.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_tuned_check.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --warmup 200 --iters 40"
left() { echo $(( ${CALL_LIMIT_S:-570} - SECONDS )); }
mkdir -p /tmp/res
O=benchmarks/results/h200x4/nccl-tests-ceiling/env-oracle/env_oracle_best.json
for launch in single mpi; do
  ceil=0; [ "$launch" = mpi ] && ceil=64
  export AUTOCCL_CACHE_DIR=/tmp/cache-$launch; rm -rf "$AUTOCCL_CACHE_DIR"
  echo "== $launch (${SECONDS} s)"
  $S --plan plain-long --launch $launch --logdir /tmp/ntlogs/plain-$launch --out /tmp/res/$launch.jsonl --budget-s "$(left)"
  for step in online table online; do
    tag=$step; [ "$step" = online ] && [ -f /tmp/res/${launch}_online.done ] && tag=rerun
    $S --plan $step --launch $launch --online-ceiling $ceil --keep-traces /tmp/traces/$launch-$tag \
      --logdir /tmp/ntlogs/$launch-$tag --out /tmp/res/${launch}_$tag.jsonl --budget-s "$(left)"
    touch /tmp/res/${launch}_$step.done
    plan=online; [ "$step" = table ] && plan=table
    python3 benchmarks/nccl_tests/online_report.py /tmp/res/${launch}_$tag.jsonl $O --plain /tmp/res/$launch.jsonl \
      --launch $launch --plan $plan > /tmp/res/report_${launch}_$tag.md 2>&1
    echo "$launch $tag: $(tail -1 /tmp/res/report_${launch}_$tag.md)"
  done
  cp -r "$AUTOCCL_CACHE_DIR" /tmp/res/ 2>/dev/null
done
python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces > /tmp/res/pinned.md 2>&1
tar -C /tmp -czf "$OUT/results.tgz" res
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
