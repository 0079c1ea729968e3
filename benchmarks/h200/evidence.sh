#!/bin/bash
# Issue 4's evidence matrix on 4 x H200 in two device calls (each well under the 10-minute limit):
#   bash benchmarks/h200/evidence.sh call1   # ~8 min: coll nccl+online, static-best, train 350M
#   bash benchmarks/h200/evidence.sh call2   # ~8 min: coll oracle, train 350M online with 64 channels
# Collectives: AG/RS/AR x 1 MiB..1 GiB (x4 steps: the targets' 16/64/256 MiB included), bf16, loads none,
# light (the AutoCCL paper's GEMM) and heavy (8192^3 bf16). `online` runs with communicators of 64 channels
# (--online-channel-ceiling 64), the search's full range; `nccl` is plain NCCL (24 channels here).
# call2 reads call1's coll_base.json from benchmarks/results/h200x4/bench/ (copy it there between the
# calls) so that every file sizes the GEMM work of a loaded cell identically and makespans compare.
source "$(dirname "$0")/common.sh"
SIZES=1M:1G:x4
COLL=(--colls ag,rs,ar --sizes "$SIZES" --dtype bf16 --load none,light,heavy -w 5 -n 20 -r 5)
GEMM_FROM=${GEMM_REPS_FROM:-benchmarks/results/h200x4/bench/coll_base.json}
deadline=$((SECONDS + ${CALL_LIMIT_S:-560}))
left() { echo $((deadline - SECONDS)); }
case "${1:?call1|call2}" in
  call1)
    machine_info
    install_autoccl
    run_part coll_base "$(( $(left) - 330 ))" python3 -m autoccl bench coll "${COLL[@]}" --modes nccl,online \
      --online-warmup 200 --online-channel-ceiling 64
    GEMM=()
    [ -f "$OUT/coll_base.json" ] && GEMM=(--gemm-reps-from "$OUT/coll_base.json")
    run_part coll_staticbest "$(( $(left) - 170 ))" python3 -m autoccl bench coll "${COLL[@]}" "${GEMM[@]}" \
      --modes static-best --sweep-load none --sweep-iters 10 --sweep-reps 3
    echo "=== train_350m (budget $(left) s)"
    t0=$SECONDS
    timeout "$(left)" python3 -m autoccl bench train --preset 350m --parallel fsdp2,ddp --modes nccl,online \
      -n 200 --batch 4 --seq 1024 --dtype bf16 --no-progress -o "$OUT/train_350m" || echo "=== exit status $?"
    echo "=== train_350m took $((SECONDS - t0)) s" ;;
  call2)
    machine_info
    install_autoccl
    GEMM=()
    [ -f "$GEMM_FROM" ] && GEMM=(--gemm-reps-from "$GEMM_FROM") || echo "no $GEMM_FROM: GEMM work sized afresh"
    run_part coll_oracle "$(( $(left) - 100 ))" python3 -m autoccl bench coll "${COLL[@]}" "${GEMM[@]}" \
      --modes oracle --sweep-iters 10 --sweep-reps 3
    echo "=== train_350m_ceiling64 (budget $(left) s)"
    t0=$SECONDS
    timeout "$(left)" python3 -m autoccl bench train --preset 350m --parallel fsdp2,ddp --modes online \
      --online-channel-ceiling 64 -n 200 --batch 4 --seq 1024 --dtype bf16 --no-progress \
      -o "$OUT/train_350m_ceiling64" || echo "=== exit status $?"
    echo "=== train_350m_ceiling64 took $((SECONDS - t0)) s" ;;
  *) echo "unknown call $1"; exit 2 ;;
esac
echo "total ${SECONDS} s"
