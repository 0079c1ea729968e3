#!/usr/bin/env bash
# GPU check: fixed mode for every supported (algorithm, protocol) x channels, one process per GPU
# ({16}) and one process for all GPUs ({4, 16, 64}), data checked; the plugin's per-call cost; and the
# torchrun equivalence check (every iteration against a local reference; tuned vs plain digests) under
# forced non-default configurations.
# Usage on the GPU machine, from the repo root:  bash benchmarks/nccl_tests/gpu_fixed_check.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
AC="python3 -m autoccl"; mkdir -p /tmp/traces
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --logdir /tmp/ntlogs --keep-traces /tmp/traces"
left() { echo $(( ${CALL_LIMIT_S:-560} - SECONDS )); }
EQ=benchmarks/torch_check/equivalence.py
TR="torchrun --nproc-per-node $NGPU"
$TR $EQ --iters 6 --out "$OUT/eq_plain.json" 2>&1 | grep -E "equivalence|Error" | tail -3
for rule in '*:ring/ll128/8' 'allreduce:tree/ll/16;*:ring/ll/4' 'allreduce:tree/simple/64;*:ring/simple/64'; do
  tag=$(echo "$rule" | tr -c 'a-z0-9' '_')
  $AC run --mode fixed --fixed "$rule" --channel-ceiling 64 --trace /tmp/traces/eq_$tag -- \
    $TR $EQ --iters 6 --out "/tmp/eq_$tag.json" 2>&1 | grep -E "equivalence|Error" | tail -3
  echo "[$rule] $(python3 $EQ --compare "$OUT/eq_plain.json" "/tmp/eq_$tag.json" | tail -1)"
done
$S --plan fixed --launch mpi --channels 16 --out "$OUT/fixed.jsonl" --budget-s "$(( $(left) - 230 ))"
$S --plan overhead --launch single --colls all_reduce --min-bytes 8 --iters 400 --warmup 50 --check 0 \
   --out "$OUT/overhead.jsonl" --budget-s "$(( $(left) - 190 ))"
$S --plan fixed --launch single --channels 4,16,64 --out "$OUT/fixed.jsonl" --budget-s "$(( $(left) - 15 ))"
tar -C /tmp -czf "$OUT/logs.tgz" ntlogs traces acbuild.log 2>/dev/null
echo "total ${SECONDS} s"
