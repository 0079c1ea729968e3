#!/bin/bash
# Does online tuning inside training pay? (benchmarks/results/h200x2/fsdp2-training; on 4 x H200 an earlier engine
# gave FSDP2 350M 1.09x steady with a break-even after 281 iterations in one call, 0.91x in another.)
# GPT-style 350M, FSDP2, every visible GPU, -n ITERS (default 300), plain NCCL vs `online`, two launches of
# each interleaved (rep 1: nccl then online; rep 2: online then nccl) so that drift of the shared box shows.
#   OUT=<dir> bash benchmarks/h200/train_rerun.sh
# TRAIN_ARGS: more `autoccl bench train` options, e.g. TRAIN_ARGS="--online-channel-ceiling 64".
# Writes $OUT/train_rep{1,2}.{json,md,csv} and the per-launch logs.
source "$(dirname "$0")/common.sh"
install_autoccl
machine_info > "$OUT/machine.txt"
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
ITERS=${ITERS:-300}
for rep in 1 2; do
  modes=nccl,online; [ $rep = 2 ] && modes=online,nccl
  t0=$SECONDS
  python3 -m autoccl bench train --preset 350m --parallel fsdp2 --modes $modes -n "$ITERS" --batch 4 --seq 1024 \
    --dtype bf16 --no-progress ${TRAIN_ARGS:-} -o "$OUT/train_rep$rep" || echo "=== rep $rep: exit status $?"
  echo "=== rep $rep ($modes) took $((SECONDS - t0)) s"
  cat "$OUT/train_rep$rep.md" 2>/dev/null
done
