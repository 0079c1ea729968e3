#!/usr/bin/env bash
# GPU check: online mode under stock NCCL with nccl-tests, data checked (-c 1), one process for all
# GPUs and one process per GPU, with matched plain-NCCL runs (same iteration counts: 200 warm-up calls per size
# carry the tuning phase, then 40 timed); every rank's per-call decisions compared from the traces; and the
# torchrun equivalence check while the tuner explores (50 iterations x 3 calls per task).
# Usage on the GPU machine, from the repo root:  bash benchmarks/nccl_tests/gpu_online_check.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
export AUTOCCL_CACHE_DIR=/tmp/autoccl-cache   # a fresh cache: every run below starts untuned
mkdir -p /tmp/traces
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --logdir /tmp/ntlogs --keep-traces /tmp/traces"
L="--warmup 200 --iters 40"
left() { echo $(( ${CALL_LIMIT_S:-560} - SECONDS )); }
EQ=benchmarks/torch_check/equivalence.py
TR="torchrun --nproc-per-node $NGPU"
$S --plan plain-long --launch single $L --out "$OUT/online.jsonl" --budget-s "$(left)"
rm -rf "$AUTOCCL_CACHE_DIR"
$S --plan online --launch single $L --out "$OUT/online.jsonl" --budget-s "$(( $(left) - 200 ))"
rm -rf "$AUTOCCL_CACHE_DIR"
$S --plan online --launch mpi $L --out "$OUT/online.jsonl" --budget-s "$(( $(left) - 130 ))"
rm -rf "$AUTOCCL_CACHE_DIR"
$TR $EQ --iters 50 --out "$OUT/eq_plain.json" 2>&1 | grep -E "^equivalence|Error" | tail -3
python3 -m autoccl run --mode online --channel-ceiling 64 --trace /tmp/traces/eq_online -- \
  $TR $EQ --iters 50 --out "$OUT/eq_online.json" 2>&1 | grep -E "^equivalence|Error" | tail -3
echo "[online equivalence] $(python3 $EQ --compare "$OUT/eq_plain.json" "$OUT/eq_online.json" | tail -1)"
python3 -c "
import sys; sys.path.insert(0, 'benchmarks/nccl_tests'); import sweep, glob
print('[online equivalence] cross-rank', sweep.cross_rank_agreement(glob.glob('/tmp/traces/eq_online*.jsonl')))"
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
