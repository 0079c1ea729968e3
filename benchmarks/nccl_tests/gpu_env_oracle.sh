#!/usr/bin/env bash
# GPU check: plain NCCL with one process for all GPUs and one process per GPU (data checked),
# then the per-task space through NCCL's own knobs (env-oracle) within the call's time limit.
# Usage on the GPU machine, from the repo root:  bash benchmarks/nccl_tests/gpu_env_oracle.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
S="python3 benchmarks/nccl_tests/sweep.py --bin $NT_BIN --logdir /tmp/ntlogs"
left() { echo $(( ${CALL_LIMIT_S:-560} - SECONDS )); }
$S --plan plain --launch single --out "$OUT/plain.jsonl" --budget-s "$(left)"
$S --plan plain --launch mpi --out "$OUT/plain.jsonl" --budget-s "$(left)"
$S --plan env-oracle --launch single --colls all_gather,reduce_scatter,all_reduce --channels 0,4,8,16,32,64 \
   --check 0 --iters 12 --out "$OUT/env_oracle.jsonl" --budget-s "$(( $(left) - 90 ))"
$S --plan env-oracle --launch single --colls broadcast,reduce --channels 0,8,32 \
   --check 0 --iters 12 --out "$OUT/env_oracle.jsonl" --budget-s "$(( $(left) - 15 ))"
tar -C /tmp -czf "$OUT/ntlogs.tgz" ntlogs 2>/dev/null
echo "total ${SECONDS} s"
