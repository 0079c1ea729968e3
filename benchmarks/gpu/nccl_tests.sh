#!/usr/bin/env bash
# On a GPU machine of the device tool: set it up (nccl-tests and MPICH from the carried .carry/ and .whl/,
# the plugin built from this checkout) and run `autoccl bench nccl-tests` for each plan named in PLANS.
# Results go to $OUT/<plan>/ and, tarred, to $OUT/<plan>.tgz (the tool brings back few files).
#
#   PLANS="overhead online" OUT=/tmp/out bash benchmarks/gpu/nccl_tests.sh
#
# Plans (each a set of `autoccl bench nccl-tests` arguments; BUDGET_S bounds the whole script):
#   overhead  plain / plugin idle / observe under both clocks: what being loaded and timing cost per call
#   online    plain against the default `autoccl run --` (launch clock) and the kernel clock, traced
#   plain64   plain against plain NCCL on 64-channel communicators (what more channels can give)
#   custom    ARGS as given in BENCH_ARGS
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
BUDGET_S=${BUDGET_S:-540}
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
echo "setup done at $((SECONDS - T0)) s"
LAUNCH=${LAUNCH:-single,mpi}
PASSES=${PASSES:-2}
COLLS=${COLLS:-all_gather,reduce_scatter,all_reduce}
SIZES=${SIZES:--b 1M -e 1G -f 2}
ITERS=${ITERS:--w 20 -n 40}
for plan in ${PLANS:-overhead online}; do
  case $plan in
    overhead) args=(-m plain -m idle -m "observe-kernel:--mode observe AUTOCCL_CLOCK=kernel" -m "observe-launch:--mode observe AUTOCCL_CLOCK=launch") ;;
    online) args=(-m plain -m "online-kernel:AUTOCCL_CLOCK=kernel" -m online --trace) ;;
    plain64) args=(-m plain -m "plain64:plain NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64") ;;
    custom) eval "args=(${BENCH_ARGS:-})" ;;
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
