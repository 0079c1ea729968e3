#!/bin/bash
# The PyTorch bench matrix on 4 x H200 (benchmarks/results/h200x4/pytorch-bench), in device calls of < 10 minutes each:
#   bash benchmarks/h200/evidence.sh call1   # ~6 min: coll nccl + online (64 channels), static-best, train 350M
#   bash benchmarks/h200/evidence.sh call2   # ~7 min: coll online (NCCL's channels and 64), train 350M online,
#                                            #         oracle part a (channel counts auto,16,64)
#   bash benchmarks/h200/evidence.sh call3   # ~9 min: train 350M FSDP2 nccl vs online, nccl_tests/gpu_online_check.sh
#                                            #         (nccl-tests under online mode), then oracle part b (8,32) if time is left
# Collectives: AG/RS/AR x 1 MiB..1 GiB (x4 steps: the targets' 16/64/256 MiB included), bf16, loads none,
# light (the AutoCCL paper's GEMM) and heavy (8192^3 bf16). `nccl` is plain NCCL (24 channels here).
# Calls 2 and 3 read call 1's coll_base.json from benchmarks/results/h200x4/pytorch-bench/ so that every file sizes
# the GEMM work of a loaded cell identically and makespans compare across files.
# At most 8 files come back from a call: everything is packed into results.tgz and logs.tgz at the end.
source "$(dirname "$0")/common.sh"
SIZES=1M:1G:x4
COLL=(--colls ag,rs,ar --sizes "$SIZES" --dtype bf16 --load none,light,heavy -w 5 -n 20 -r 5)
GEMM_FROM=${GEMM_REPS_FROM:-benchmarks/results/h200x4/pytorch-bench/coll_base.json}
deadline=$((SECONDS + ${CALL_LIMIT_S:-560}))
left() { echo $((deadline - SECONDS)); }
gemm_from() { GEMM=(); [ -f "$GEMM_FROM" ] && GEMM=(--gemm-reps-from "$GEMM_FROM") || echo "no $GEMM_FROM: GEMM sized afresh"; }
train() {  # train NAME BUDGET ARGS...
  local name=$1 budget=$2; shift 2
  echo "=== $name (budget $budget s)"
  local t0=$SECONDS
  timeout "$budget" python3 -m autoccl bench train --preset 350m --parallel fsdp2,ddp -n 200 --batch 4 --seq 1024 \
    --dtype bf16 --no-progress -o "$OUT/$name" "$@" || echo "=== $name: exit status $?"
  echo "=== $name took $((SECONDS - t0)) s"
}
pack() {
  (cd "$OUT" && tar czf results.tgz --ignore-failed-read ./*.json ./*.csv ./*.md 2>/dev/null; \
   tar czf logs.tgz --ignore-failed-read ./*.logs pip-install.log 2>/dev/null; \
   rm -rf ./*.logs ./*.json ./*.csv ./*.md pip-install.log)
}
case "${1:?call1|call2|call3|call4}" in
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
    gemm_from
    run_part coll_online "$(( $(left) - 440 ))" python3 -m autoccl bench coll "${COLL[@]}" "${GEMM[@]}" \
      --modes online --online-warmup 200
    run_part coll_online64 "$(( $(left) - 370 ))" python3 -m autoccl bench coll "${COLL[@]}" "${GEMM[@]}" \
      --modes online --online-warmup 200 --online-channel-ceiling 64
    train train_350m_online "$(( $(left) - 290 ))" --modes online
    run_part coll_oracle_a "$(left)" python3 -m autoccl bench coll "${COLL[@]}" "${GEMM[@]}" \
      --modes oracle --oracle-channels auto,16,64 --sweep-iters 10 --sweep-reps 3 ;;
  call3)
    machine_info
    install_autoccl
    gemm_from
    train train_350m_fsdp2 150 --parallel fsdp2 --modes nccl,online
    mkdir -p "$OUT/nt"
    ( OUT="$OUT/nt" CALL_LIMIT_S=280 bash benchmarks/nccl_tests/gpu_online_check.sh )
    if [ "$(left)" -gt 120 ]; then
      run_part coll_oracle_b "$(left)" python3 -m autoccl bench coll "${COLL[@]}" "${GEMM[@]}" \
        --modes oracle --oracle-channels 8,32 --sweep-iters 10 --sweep-reps 3
    fi
    pack ;;
  call4)  # ~3 min: load none again with 100 iterations per repetition (20 left mid sizes noise-dominated)
    machine_info
    install_autoccl
    L=(--colls ag,rs,ar --sizes "$SIZES" --dtype bf16 --load none -w 5 -n 100 -r 5 --online-warmup 200)
    run_part coll_none_n100 "$(( $(left) - 60 ))" python3 -m autoccl bench coll "${L[@]}" --modes nccl,online \
      --online-channel-ceiling 64
    run_part coll_none_n100_online24 "$(left)" python3 -m autoccl bench coll "${L[@]}" --modes online ;;
  *) echo "unknown call $1"; exit 2 ;;
esac
[ "${1}" = call3 ] || pack
echo "total ${SECONDS} s"
