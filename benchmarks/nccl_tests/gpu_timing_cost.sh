#!/usr/bin/env bash
# GPU check: what does kernel timing (the profiler's Coll + KernelCh events)
# cost one process that launches 4 GPUs, per channel count? A cycles check traced reduce_scatter 16 MiB:
# NCCL's 64-channel choice ran ~110 us per call while timed and ~59 us untimed (plain, 64-channel comms), while
# 18 channels ran ~65 us either way; scored by stream period the search then left NCCL's choice (0.96x).
# nccl-tests -g 4, -b 4M -e 64M -f 4, -w 100 -n 40 -c 1 -N 2; out-of-place time per call of the last pass:
#   plainN    NCCL alone, N-channel communicators (NCCL_MIN_CTAS=NCCL_MAX_CTAS=N; 0 = NCCL's own)
#   idleN     plugin loaded, timing off (table mode, empty table, AUTOCCL_MEASURE_CALLS=0)
#   observeN  plugin loaded, every call timed (mode observe)
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_timing_cost.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
L=/tmp/tcost; mkdir -p $L/logs $L/traces
for coll in ${COLLS:-reduce_scatter all_reduce}; do
  for v in ${VARIANTS:-plain0 plain64 idle64 observe0 observe24 observe32 observe48 observe64}; do
    [ $SECONDS -gt "${CALL_LIMIT_S:-540}" ] && { echo "[$coll $v] skipped: time"; continue; }
    n=${v//[a-z]/}; kind=${v//[0-9]/}
    ctas=(); [ "$n" != 0 ] && ctas=(env NCCL_MIN_CTAS=$n NCCL_MAX_CTAS=$n AUTOCCL_MAX_CHANNELS=$n)
    case $kind in
      plain) wrap=() ;;
      idle) wrap=(python3 -m autoccl run --mode table --cache-dir /tmp/empty-cache --) ;;
      observe) wrap=(python3 -m autoccl run --mode observe --trace $L/traces/$coll-$v --) ;;
    esac
    rm -rf /tmp/empty-cache; t0=$SECONDS
    AUTOCCL_MEASURE_CALLS=0 timeout 120 "${ctas[@]}" "${wrap[@]}" \
      $NT_BIN/${coll}_perf -b 4M -e 64M -f 4 -w 100 -n 40 -c 1 -N 2 -g 4 > $L/logs/$coll-$v.log 2>&1
    echo "[$coll $v] rc=$? $((SECONDS - t0)) s"
  done
done
python3 - <<'PY' | tee "$OUT/timing_cost.md"
import glob, json, os, re, statistics, sys
sys.path.insert(0, "benchmarks/nccl_tests"); import sweep
for coll in ("reduce_scatter", "all_reduce"):
    logs = sorted(glob.glob(f"/tmp/tcost/logs/{coll}-*.log"))
    if not logs: continue
    print(f"\n## {coll}: one process for 4 GPUs, out-of-place us per call (last pass); observe: median window / period of rank 0\n")
    print("| variant | 4 MiB | 16 MiB | 64 MiB | data errors |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for p in logs:
        v = os.path.basename(p)[len(coll) + 1:-4]
        rows = sweep.parse_rows(open(p).read())
        last = max((r["cycle"] for r in rows), default=-1)
        t = {r["bytes"]: r["oop_time_us"] for r in rows if r["cycle"] == last}
        wrong = sum((r["oop_wrong"] or 0) + (r["ip_wrong"] or 0) for r in rows)
        # observe times every call: a call's period is rank 0's next kernel start minus its own (same size)
        recs = sorted((r for r in sweep.trace_records(glob.glob(f"/tmp/tcost/traces/{coll}-{v}*.jsonl"), "time")
                       if r.get("rank") == 0 and r.get("t0_ns")), key=lambda r: r["t0_ns"])
        extra = {}
        for a, b in zip(recs, recs[1:]):
            if a["bytes"] == b["bytes"] and a["comm"] == b["comm"]:
                extra.setdefault(a["bytes"], []).append((a["gpu_us"], (b["t0_ns"] - a["t0_ns"]) / 1e3))
        def cell(b):
            s = f"{t[b]:.1f}" if b in t else "-"
            if b in extra:
                w = statistics.median(x for x, _ in extra[b]); pr = statistics.median(y for _, y in extra[b])
                s += f" ({w:.0f} / {pr:.0f})"
            return s
        print(f"| {v} | " + " | ".join(cell(b << 20) for b in (4, 16, 64)) + f" | {wrong} |")
PY
tar -C /tmp -czf "$OUT/tcost.tgz" tcost
echo "total ${SECONDS} s"
