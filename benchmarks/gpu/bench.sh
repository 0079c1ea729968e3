#!/usr/bin/env bash
# On a GPU machine: set it up (benchmarks/gpu/setup.sh: nccl-tests and MPICH from the carried .carry/ and .whl/,
# the plugin built from this checkout) and run the benchmark plans named in PLANS, each a sequence of the product's
# own commands (`autoccl bench nccl-tests|coll|train`): a user with a GPU node runs the same commands we do. Results go to
# $OUT/<plan>/ and, tarred, to $OUT/<plan>.tgz (the tool brings back few files).
#
#   PLANS="overhead online train" OUT=/tmp/out bash benchmarks/gpu/bench.sh
#
# Plans (each a set of `autoccl bench nccl-tests` arguments; BUDGET_S bounds the whole script):
#   overhead  plain NCCL / plugin idle on NCCL's communicators / idle on 64-channel communicators (what online
#             mode creates) / observe under the launch clock and under the kernel clock: what being loaded costs
#   online    plain NCCL against the default `autoccl run --` (passes after the first start from the table
#             the earlier ones wrote), traced: cross-rank agreement and what was pinned
#   design    plain, idle64 and online together
#   plain64   plain NCCL against plain NCCL on 64-channel communicators (what more channels can give)
#   custom    ARGS as given in BENCH_ARGS
#   coll      `autoccl bench coll` AG/RS/AR 4 MiB-1 GiB beside no, light and heavy GEMM load: plain NCCL, online,
#             static-best (one knob at a time) and the oracle (every configuration fixed mode can force, best per
#             cell); COLL_SIZES, COLL_LOADS, ORACLE_CHANNELS narrow it (the whole matrix takes ~40 min on 4 GPUs)
#   check     `autoccl bench coll --check`: every collective's result against a reference, plain and online
#   train     `autoccl bench train` (TRAIN_PRESET, default 350m; FSDP2 and DDP; plain NCCL then online) repeated
#             TRAIN_PAIRS times (default 2): interleaved launch pairs, each online launch starting cold
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
BUDGET_S=${BUDGET_S:-540}
source benchmarks/gpu/setup.sh || exit 1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
echo "setup done at $((SECONDS - T0)) s"
LAUNCH=${LAUNCH:-single,mpi}
PASSES=${PASSES:-2}
COLLS=${COLLS:-all_gather,reduce_scatter,all_reduce}
SIZES=${SIZES:--b 1M -e 1G -f 2}
ITERS=${ITERS:--w 20 -n 40}
IDLE64="idle64:--mode table --cache-dir {empty} --channel-ceiling 64 --nccl-channels auto"
for plan in ${PLANS:-overhead online}; do
  case $plan in
    overhead) args=(-m plain -m idle -m "$IDLE64" -m observe -m "observe-kernel:--mode observe AUTOCCL_CLOCK=kernel") ;;
    online) args=(-m plain -m online --trace) ;;
    design) args=(-m plain -m "$IDLE64" -m online --trace) ;;
    plain64) args=(-m plain -m "plain64:plain NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64") ;;
    custom) eval "args=(${BENCH_ARGS:-})" ;;
    coll|check)
      left=$((BUDGET_S - (SECONDS - T0)))
      if [ "$left" -lt 60 ]; then echo "plan $plan skipped: ${left} s left"; continue; fi
      if [ "$plan" = coll ]; then
        cargs=(--colls ag,rs,ar --sizes "${COLL_SIZES:-4M:1G:x4}" --dtype bf16 --load "${COLL_LOADS:-none,light,heavy}"
               -w 5 -n 20 -r 5 --modes nccl,online,static-best,oracle --online-warmup 200 --sweep-iters 10
               --sweep-reps 3 --oracle-channels "${ORACLE_CHANNELS:-auto,16,32,64}")
      else
        cargs=(--colls all --sizes 1M:256M:x16 --dtype bf16 --check -w 2 -n 5 -r 3 --modes nccl,online --online-warmup 50)
      fi
      mkdir -p "$OUT/$plan"
      timeout "$left" python3 -m autoccl bench coll "${cargs[@]}" --no-progress -o "$OUT/$plan/$plan" 2>&1 | tail -40
      (cd "$OUT" && tar czf "$plan.tgz" --exclude='*.logs' "$plan" && rm -rf "$plan")
      continue ;;
    train)
      mkdir -p "$OUT/train"
      for p in $(seq "${TRAIN_PAIRS:-2}"); do
        left=$((BUDGET_S - (SECONDS - T0)))
        if [ "$left" -lt 60 ]; then echo "train pair $p skipped: ${left} s left"; break; fi
        timeout "$left" python3 -m autoccl bench train --preset "${TRAIN_PRESET:-350m}" --parallel fsdp2,ddp \
          --modes nccl,online -n "${TRAIN_ITERS:-100}" --no-progress -o "$OUT/train/pair$p" 2>&1 | tail -12
      done
      (cd "$OUT" && tar czf train.tgz --exclude='*.logs' train && rm -rf train)
      continue ;;
    *) echo "unknown plan $plan"; exit 2 ;;
  esac
  left=$((BUDGET_S - (SECONDS - T0)))
  if [ "$left" -lt 30 ]; then echo "plan $plan skipped: ${left} s left"; continue; fi
  echo "== plan $plan (${left} s left)"
  # shellcheck disable=SC2086
  timeout "$left" python3 -m autoccl bench nccl-tests --bin "$NT_BIN" --launch "$LAUNCH" -c "$COLLS" -p "$PASSES" \
    $SIZES $ITERS --timeout 120 --no-progress -o "$OUT/$plan" "${args[@]}" 2>&1 | tail -40
  [ -f "$OUT/$plan/summary.md" ] || python3 -m autoccl bench nccl-tests --bin "$NT_BIN" -o "$OUT/$plan" \
    --report-only "${args[@]}" 2>&1 | tail -30
  (cd "$OUT" && tar czf "$plan.tgz" --exclude="$plan/traces" --exclude="$plan/cache" "$plan" && \
     tar czf "$plan-traces.tgz" "$plan/traces" "$plan/cache" 2>/dev/null; rm -rf "$plan")
done
echo "done at $((SECONDS - T0)) s"
