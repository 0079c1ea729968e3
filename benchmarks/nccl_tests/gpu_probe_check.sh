#!/usr/bin/env bash
# GPU call: does `--nccl-channels auto` find the channel count of a plain communicator, and does that
# count reach the plugin and cap NCCL's own choice on a raised (--channel-ceiling 64) communicator?
#   reference  nccl-tests (-g NGPU, one process) with NCCL_DEBUG=INFO: NCCL's "<N> coll channels"
#   auto       `autoccl env --channel-ceiling 64 --nccl-channels auto` (all GPUs, then --probe-gpus 2),
#              also from a shell that already exported a ceiling (must not leak into the probe)
#   observe    nccl-tests all_gather 64 MiB under `autoccl run --mode observe --channel-ceiling 64`, with and
#              without `--nccl-channels auto`: the channels NCCL ran (plugin trace, task events)
# Summary in $OUT/summary.txt; logs beside it.
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
S=$OUT/summary.txt
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT "$NT_BIN/all_reduce_perf" -b 1M -e 1M -w 1 -n 1 -g "$NGPU" > "$OUT/reference.txt" 2>&1
echo "reference (nccl-tests -g $NGPU): $(grep -oE '[0-9]+ coll channels' "$OUT/reference.txt" | sort | uniq -c | xargs)" | tee "$S"

probe() {  # $1: label, rest: extra autoccl env options
  local label=$1; shift
  local t0=$SECONDS
  python3 -m autoccl env --mode observe --channel-ceiling 64 --nccl-channels auto "$@" > "$OUT/auto-$label.env" 2> "$OUT/auto-$label.err"
  echo "auto $label: rc=$? $((SECONDS - t0)) s, $(grep -h AUTOCCL_NCCL_CHANNELS "$OUT/auto-$label.env"); $(grep -h 'plain communicator over' "$OUT/auto-$label.err")" | tee -a "$S"
}
probe all
probe gpus2 --probe-gpus 2
( eval "$(python3 -m autoccl env --mode observe --channel-ceiling 64 2>/dev/null)"; probe after-ceiling-export )

for cap in none auto; do
  rm -rf "/tmp/tr-$cap"; mkdir -p "/tmp/tr-$cap"
  opts=(--mode observe --channel-ceiling 64 --trace "/tmp/tr-$cap/t")
  [ $cap = auto ] && opts+=(--nccl-channels auto)
  python3 -m autoccl run "${opts[@]}" -- "$NT_BIN/all_gather_perf" -b 1M -e 64M -f 8 -w 5 -n 20 -c 1 -g "$NGPU" \
    > "$OUT/observe-$cap.txt" 2>&1
  rc=$?
  wrong=$(grep -E "^ +[0-9]+ " "$OUT/observe-$cap.txt" | awk '{ if ($9 != "0" || $13 != "0") n++ } END { print n + 0 }')
  chans=$(cat /tmp/tr-$cap/t* | python3 -c '
import json, sys
seen = {}
for line in sys.stdin:
    r = json.loads(line)
    if r.get("ev") == "task":
        seen.setdefault(r["bytes"], set()).add(r["nccl_channels"])
print("; ".join(f"{b >> 20} MiB: {sorted(c)}" for b, c in sorted(seen.items())))')
  echo "observe cap=$cap: rc=$rc, rows with wrong results $wrong, channels NCCL ran per size: $chans" | tee -a "$S"
done
