#!/usr/bin/env bash
# The resilience scenario on 2 GPUs with NCCL (docs/resilience.md): a 350m GPT under DDP, rank 1 slowed to
# 2-5x its step on 20 % of the steps, synchronous against the resilient reducer, clean and injected; then a
# run in which rank 1 is killed at step 100 (the survivor must go on within 30 s: see the
# "lost at step ... (new_group|shrink_group, S s)" line in kill.logs/*/rank0.log and kill.json's
# train[].resilience.recoveries). NOT YET RUN: no GPU numbers exist for it.
#
#   OUT=/tmp/out PART=straggler bash benchmarks/gpu/resilience.sh    # then PART=kill (each < 10 min)
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
OUT=${OUT:?set OUT to the output folder}
PART=${PART:-straggler}
PRESET=${PRESET:-350m}
ITERS=${ITERS:-500}
mkdir -p "$OUT"
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
python -c "import torch, torch.distributed as d; print(torch.__version__, torch.cuda.nccl.version(), hasattr(d, 'shrink_group'))" \
  > "$OUT/versions.txt"
COMMON=(--device cuda --nproc 2 --preset "$PRESET" --parallel ddp --modes nccl --batch 4 --seq 1024 --dtype bf16
        --data markov --lr 3e-4 --delay sleep --no-progress --timeout 540)
case "$PART" in
  straggler) python -m autoccl bench train "${COMMON[@]}" --iters "$ITERS" --resilience both \
               --straggler 1:0.2:2-5 -o "$OUT/straggler" ;;
  kill) python -m autoccl bench train "${COMMON[@]}" --iters 200 --resilience on --kill 1:100 \
          --no-clean-baseline -o "$OUT/kill" ;;
  *) echo "PART must be straggler or kill, not '$PART'" >&2; exit 2 ;;
esac
