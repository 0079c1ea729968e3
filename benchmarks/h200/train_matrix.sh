#!/bin/bash
# The training matrix: a GPT-style training step (bf16) with FSDP2 and DDP on all local GPUs, modes nccl vs
# online, 200 iterations each with a per-iteration trace. One command per part (each < 10 min):
#   bash benchmarks/h200/train_matrix.sh install   # ~3-5 min
#   bash benchmarks/h200/train_matrix.sh 350m      # 4 launches, ~3 min
#   bash benchmarks/h200/train_matrix.sh 1.3b      # 4 launches, ~5 min
# Estimated device time: ~13 min.
source "$(dirname "$0")/common.sh"
part=${1:?part: install|350m|760m|1.3b}
if [ "$part" = install ]; then machine_info; install_autoccl; exit 0; fi
install_autoccl
echo "=== train_$part (budget 590 s; GPUs: $(gpu_count)); rough estimate: 4 launches x (25 s start-up + 200 iterations)"
t0=$SECONDS
timeout 590 python3 -m autoccl bench train --preset "$part" --parallel fsdp2,ddp --modes nccl,online -n 200 \
  --batch 4 --seq 1024 --dtype bf16 --no-progress -o "$OUT/train_$part" || echo "=== exit status $?"
echo "=== train_$part took $((SECONDS - t0)) s"
