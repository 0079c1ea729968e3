#!/bin/bash
# The oracle sweep (every (algo, proto) x channel count the plugin's fixed mode can force, best
# per cell) for AG/RS/AR x 1 MB..1 GB at load none/light/heavy. all_reduce has 2 algorithms x 3 protocols
# x 5 channel counts = 30 launches; split over parts by channel count (each < 10 min):
#   bash benchmarks/h200/oracle_sweep.sh install   # ~3-5 min
#   bash benchmarks/h200/oracle_sweep.sh a         # auto,8   : 12 launches, ~6 min
#   bash benchmarks/h200/oracle_sweep.sh b         # 16,32    : 12 launches, ~6 min
#   bash benchmarks/h200/oracle_sweep.sh c         # 64       :  6 launches, ~3 min
# Estimated device time: ~20 min. `autoccl report` over the three files forms one oracle (best per cell).
# Set GEMM_REPS_FROM to coll_matrix.sh's coll_base.json (default $OUT/coll_base.json) so the GEMM work per
# loaded cell is the same as there; without it each part
# sizes the GEMM work itself and makespans do not compare across files.
source "$(dirname "$0")/common.sh"
COMMON=(--colls ag,rs,ar --sizes 1M:1G:x2 --dtype bf16 --load none,light,heavy -w 5 --sweep-iters 10 --sweep-reps 3)
GEMM=()
GEMM_FROM=${GEMM_REPS_FROM:-$OUT/coll_base.json}  # coll_matrix.sh's, so that makespans compare
[ -f "$GEMM_FROM" ] && GEMM=(--gemm-reps-from "$GEMM_FROM")
part=${1:?part: install|a|b|c}
case "$part" in
  install) machine_info; install_autoccl; exit 0 ;;
  a) CH=auto,8 ;;
  b) CH=16,32 ;;
  c) CH=64 ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
install_autoccl
run_part "coll_oracle_$part" 590 python3 -m autoccl bench coll "${COMMON[@]}" "${GEMM[@]}" --modes oracle --oracle-channels "$CH"
