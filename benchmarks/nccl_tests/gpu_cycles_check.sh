#!/usr/bin/env bash
# GPU check: busbw after tuning inside one process. nccl-tests -N 3 runs
# the timed pass over all sizes three times after the warm-up; the last pass is "after tuning" (the
# search had the warm-up and two passes). Plain NCCL runs the same -N 3 and is compared on its last pass
# too. Engine of this commit: samples are given up by time and by later samples (not after 64 calls),
# so the warm-up burst's samples count; a task's timing need ends when its samples arrive.
# Per launch (one process per GPU, then one process for 4 GPUs): plain, online, plain, online (the
# repetition: AG/RS/AR only), 1 MiB-1 GiB, -w 200 -n 40 -c 1, 64-channel communicators for online.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_cycles_check.sh
# Shorter: REPS=1 COLLS=all_gather,reduce_scatter,all_reduce EQ=0 (one repetition, three collectives, no torchrun).
# LAUNCHES="single": one launch kind only (default "mpi single").
# NCCL_CH=N: online runs get --nccl-channels N (calls left to NCCL capped at a plain communicator's count);
# unset: read from NCCL's INFO line "<N> coll channels" of a plain run; NCCL_CH=0: not passed.
# MPI_REP2_SCORE=period: the second one-process-per-GPU online run uses AUTOCCL_SCORE=period and is reported
# on its own (mpi_online_score.jsonl, report_mpi-score_cycle-*.md) against the same plain runs.
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
# the snapshot's COMMIT (git rev-parse on the machine reads the machine copy's .git, not the snapshot)
cp COMMIT "$OUT/commit.txt" 2>/dev/null || git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --warmup 200 --iters 40 --cycles 3"
left() { echo $(( ${CALL_LIMIT_S:-560} - SECONDS )); }
mkdir -p /tmp/res
if [ -z "${NCCL_CH+x}" ]; then
  NCCL_CH=$(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout 60 mpirun -np "$NGPU" "$NT_BIN/all_reduce_perf_mpi" \
    -b 1M -e 1M -w 1 -n 1 -g 1 2>&1 | grep -oE "[0-9]+ coll channels" | head -1 | cut -d' ' -f1)
fi
NCCL_CH=${NCCL_CH:-0}
echo "online runs: --channel-ceiling 64, --nccl-channels ${NCCL_CH} (0: not passed)" | tee /tmp/res/nccl_channels.txt
CAP=(); [ "$NCCL_CH" != 0 ] && CAP=(--nccl-channels "$NCCL_CH")
O=benchmarks/results/h200x4/nccl-tests-ceiling/env-oracle/env_oracle_best.json
R=benchmarks/nccl_tests/online_report.py
for launch in ${LAUNCHES:-mpi single}; do
  export AUTOCCL_CACHE_DIR=/tmp/cache-$launch; rm -rf "$AUTOCCL_CACHE_DIR"
  for rep in $(seq 1 "${REPS:-2}"); do
    colls=${COLLS:-all_gather,reduce_scatter,all_reduce,broadcast,reduce}
    [ $rep = 2 ] && colls=all_gather,reduce_scatter,all_reduce
    echo "== $launch rep $rep (${SECONDS} s)"
    $S --plan plain-long --launch $launch --colls $colls --logdir /tmp/ntlogs/$launch-plain$rep \
      --out /tmp/res/${launch}_plain.jsonl --budget-s "$(left)"
    # each online run starts cold: no table from an earlier run
    rm -rf "$AUTOCCL_CACHE_DIR"
    out=/tmp/res/${launch}_online.jsonl; score_env=()
    if [ $launch = mpi ] && [ $rep = 2 ] && [ -n "${MPI_REP2_SCORE:-}" ]; then
      out=/tmp/res/${launch}_online_score.jsonl; score_env=(env AUTOCCL_SCORE=$MPI_REP2_SCORE)
    fi
    "${score_env[@]}" $S --plan online --launch $launch --colls $colls --online-ceiling 64 \
      --online-nccl-channels "$NCCL_CH" --keep-traces /tmp/traces/$launch-online$rep --logdir /tmp/ntlogs/$launch-online$rep --out $out --budget-s "$(left)"
  done
  if [ -s /tmp/res/${launch}_online_score.jsonl ]; then
    python3 $R /tmp/res/${launch}_online_score.jsonl $O --plain /tmp/res/${launch}_plain.jsonl --launch $launch \
      --cycle last > /tmp/res/report_${launch}-score_cycle-last.md 2>&1
    echo "$launch AUTOCCL_SCORE=$MPI_REP2_SCORE cycle last: $(tail -1 /tmp/res/report_${launch}-score_cycle-last.md)"
  fi
  for c in last 0; do
    python3 $R /tmp/res/${launch}_online.jsonl $O --plain /tmp/res/${launch}_plain.jsonl --launch $launch \
      --cycle $c > /tmp/res/report_${launch}_cycle-$c.md 2>&1
    echo "$launch cycle $c: $(tail -1 /tmp/res/report_${launch}_cycle-$c.md)"
  done
  for t in /tmp/traces/$launch-online*; do
    python3 benchmarks/nccl_tests/timing_summary.py "$t" > "/tmp/res/timing_$(basename "$t").md" 2>&1
  done
done
python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces > /tmp/res/pinned.md 2>&1
# torchrun (one process per GPU): results under online tuning vs plain NCCL, checked every iteration
if [ "${EQ:-1}" = 1 ] && [ "$(left)" -gt 100 ]; then
  EQ=benchmarks/torch_check/equivalence.py; TR="torchrun --nproc-per-node $NGPU"; rm -rf "$AUTOCCL_CACHE_DIR"
  $TR $EQ --iters 50 --out /tmp/res/eq_plain.json 2>&1 | grep -E "^equivalence|Error" | tail -3
  python3 -m autoccl run --mode online --channel-ceiling 64 "${CAP[@]}" --trace /tmp/traces/eq_online -- \
    $TR $EQ --iters 50 --out /tmp/res/eq_online.json 2>&1 | grep -E "^equivalence|Error" | tail -3
  echo "[online equivalence] $(python3 $EQ --compare /tmp/res/eq_plain.json /tmp/res/eq_online.json | tail -1)"
  python3 -c "
import sys; sys.path.insert(0, 'benchmarks/nccl_tests'); import sweep, glob
print('[online equivalence] cross-rank', sweep.cross_rank_agreement(glob.glob('/tmp/traces/eq_online*.jsonl')))"
else
  echo "[online equivalence] skipped: $(left) s left"
fi
tar -C /tmp -czf "$OUT/results.tgz" res
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
