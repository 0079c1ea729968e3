#!/usr/bin/env bash
# Where an FSDP2 step loses under online mode: `autoccl bench train` 350m FSDP2, interleaved rounds of
# (plain NCCL, online with its default 64-channel communicators) and (plain NCCL, online on NCCL's own
# communicators, --channel-ceiling 0), each launch's traces and autoccl's metrics (guard verdicts) kept.
#   OUT=/tmp/out ROUNDS=2 bash benchmarks/gpu/train_channels.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
source benchmarks/gpu/setup.sh || exit 1
T0=$SECONDS
mkdir -p "$OUT/trainch/metrics"
export AUTOCCL_METRICS_DIR=$OUT/trainch/metrics AUTOCCL_METRICS_INTERVAL_S=5
for r in $(seq "${ROUNDS:-2}"); do
  for variant in c64 c0; do
    extra=(); [ "$variant" = c0 ] && extra=(--channel-ceiling 0)
    [ $((SECONDS - T0)) -gt "${BUDGET_S:-420}" ] && { echo "round $r $variant skipped"; continue; }
    python3 -m autoccl bench train --preset "${TRAIN_PRESET:-350m}" --parallel "${PARALLEL:-fsdp2}" \
      --modes nccl,online "${extra[@]}" -n "${TRAIN_ITERS:-200}" --no-progress -o "$OUT/trainch/r${r}_$variant" 2>&1 | tail -8
  done
done
(cd "$OUT" && tar czf trainch.tgz trainch && rm -rf trainch)
echo "done at $((SECONDS - T0)) s"
