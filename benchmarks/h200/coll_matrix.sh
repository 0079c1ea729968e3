#!/bin/bash
# The collective matrix: AG/RS/AR x 1 MB..1 GB at load none/light/heavy, modes nccl, online,
# static-best. One command per part (each < 10 min), in this order:
#   bash benchmarks/h200/coll_matrix.sh install     # ~3-5 min: build + install the plugin
#   bash benchmarks/h200/coll_matrix.sh base        # ~4 min: nccl + online (one launch per load)
#   bash benchmarks/h200/coll_matrix.sh staticbest  # ~8 min: 14-setting sweep at load none, winner re-measured
#   bash benchmarks/h200/coll_matrix.sh check       # ~2 min: data check of every collective, nccl and online
# Estimated device time: ~17-19 min. The GPU count comes from the machine (2, 4 or 8 GPUs).
source "$(dirname "$0")/common.sh"
COMMON=(--colls ag,rs,ar --sizes 1M:1G:x2 --dtype bf16 --load none,light,heavy -w 5 -n 20 -r 5)
case "${1:?part: install|base|staticbest|check}" in
  install) machine_info; install_autoccl ;;
  base)
    install_autoccl
    run_part coll_base 590 python3 -m autoccl bench coll "${COMMON[@]}" --modes nccl,online --online-warmup 200 ;;
  staticbest)
    install_autoccl
    # the GEMM work per loaded cell from the base part, so makespans compare across the two files
    run_part coll_staticbest 590 python3 -m autoccl bench coll "${COMMON[@]}" --modes static-best \
      --sweep-load none --sweep-iters 10 --sweep-reps 3 --gemm-reps-from "$OUT/coll_base.json" ;;
  check)
    install_autoccl
    run_part coll_check 590 python3 -m autoccl bench coll --colls all --sizes 1M:256M:x16 --dtype bf16 --check \
      -w 2 -n 5 -r 3 --modes nccl,online --online-warmup 50 ;;
  *) echo "unknown part $1"; exit 2 ;;
esac
