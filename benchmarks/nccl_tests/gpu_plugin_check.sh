#!/usr/bin/env bash
# GPU check: the plugin under stock NCCL 2.28.9 with nccl-tests, data checked (-c 1):
#  observe mode (one process for all GPUs, and one process per GPU),
#  fixed mode for every supported (algorithm, protocol) x channels {4, 16, 64} (single) and {16} (per GPU),
#  the plugin's per-call cost (plain vs loaded-but-idle vs observe, small sizes, many iterations).
# Usage on the GPU machine, from the repo root:  bash benchmarks/nccl_tests/gpu_plugin_check.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
T0=$SECONDS
source benchmarks/nccl_tests/plugin_build.sh || exit 1
echo "plugin built in $((SECONDS - T0)) s: $(ls $AUTOCCL_LIB_DIR)"
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --logdir /tmp/ntlogs --keep-traces /tmp/traces"
left() { echo $(( ${CALL_LIMIT_S:-560} - SECONDS )); }
$S --plan observe --launch single --out "$OUT/observe.jsonl" --budget-s "$(left)"
$S --plan observe --launch mpi --out "$OUT/observe.jsonl" --budget-s "$(left)"
$S --plan overhead --launch single --colls all_reduce,all_gather --min-bytes 8 --iters 400 --warmup 50 --check 0 \
   --out "$OUT/overhead.jsonl" --budget-s "$(left)"
$S --plan fixed --launch mpi --channels 16 --out "$OUT/fixed.jsonl" --budget-s "$(( $(left) - 150 ))"
$S --plan fixed --launch single --channels 4,16,64 --out "$OUT/fixed.jsonl" --budget-s "$(( $(left) - 20 ))"
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
