#!/usr/bin/env bash
# GPU check: why is one process for 4 GPUs slow at 1-16 MiB under online tuning even
# where the search pinned NCCL's own choice (all_gather 1 MiB: plain 29.9 GB/s, online 15.9)? Each variant
# changes one thing between plain NCCL and `autoccl run --mode online --channel-ceiling 64`:
#   plain       NCCL alone                      plain64    NCCL alone, 64-channel communicators
#   idle        plugin loaded, no timing       idle64     the same, 64-channel communicators
#   on64tcp     online as `autoccl run` sets it (TCP coordinator on 127.0.0.1, trace on)
#   on64tcpnt   the same without the trace     on64local  64 channels, in-process board, no trace
#   onlocal     online with NCCL's own channel count, in-process board, no trace
#   observe     every call timed, NCCL's choice recorded (what plain NCCL uses per size)
# nccl-tests -g 4 (one process), all_gather and all_reduce, 1-16 MiB, -w 200 -n 40 -c 1 -N 3 (the last pass is
# after tuning). Plain NCCL's channel setup is logged (NCCL_DEBUG_SUBSYS=INIT) to know its default count.
# Usage on the GPU machine, from the repo root:  OUT=... bash benchmarks/nccl_tests/gpu_single_overhead.sh
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
LIB=$(python3 -c 'from autoccl._paths import plugin_path; print(plugin_path())') || exit 1
L=/tmp/sologs; mkdir -p $L /tmp/sotraces
PLUG="NCCL_TUNER_PLUGIN=$LIB NCCL_PROFILER_PLUGIN=$LIB"
C64="NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64 AUTOCCL_MAX_CHANNELS=64"
TOK=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
declare -A V=(
  [plain]=""
  [plain64]="NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64"
  [idle]="$PLUG AUTOCCL_MODE=table AUTOCCL_CACHE_DIR=/tmp/empty-cache AUTOCCL_MEASURE_CALLS=0"
  [idle64]="$PLUG $C64 AUTOCCL_MODE=table AUTOCCL_CACHE_DIR=/tmp/empty-cache AUTOCCL_MEASURE_CALLS=0"
  [on64tcp]="$PLUG $C64 AUTOCCL_MODE=online AUTOCCL_COORD_TOKEN=$TOK AUTOCCL_TRACE=/tmp/sotraces/on64tcp"
  [on64tcpnt]="$PLUG $C64 AUTOCCL_MODE=online AUTOCCL_COORD_TOKEN=$TOK"
  [on64local]="$PLUG $C64 AUTOCCL_MODE=online"
  [onlocal]="$PLUG AUTOCCL_MODE=online"
  [observe]="$PLUG AUTOCCL_MODE=observe AUTOCCL_TRACE=/tmp/sotraces/observe"
)
ORDER="plain plain64 idle idle64 on64tcp on64tcpnt on64local onlocal observe"
for coll in all_gather all_reduce; do
  for v in $ORDER; do
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    extra=${V[$v]}
    case $v in on64tcp*) extra="$extra AUTOCCL_COORD_ADDR=127.0.0.1:$port" ;; esac
    [ $v = plain ] && extra="NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT"
    rm -rf /tmp/empty-cache /tmp/ac-cache; t0=$SECONDS
    env -u AUTOCCL_COORD_ADDR AUTOCCL_CACHE_DIR=/tmp/ac-cache $extra timeout 150 \
      $NT_BIN/${coll}_perf -b 1M -e 16M -f 2 -w 200 -n 40 -c 1 -N 3 -g 4 > $L/$coll-$v.log 2>&1
    echo "[$coll $v] rc=$? $((SECONDS - t0)) s"
  done
done
grep -h -i -E "nchannels|channels [0-9]|comm .* rank 0 " $L/all_gather-plain.log | head -12
python3 - <<'EOF'
import sys, glob, os
sys.path.insert(0, 'benchmarks/nccl_tests'); import sweep
order = "plain plain64 idle idle64 on64tcp on64tcpnt on64local onlocal observe".split()
for coll in ("all_gather", "all_reduce"):
    res = {}
    for v in order:
        p = f"/tmp/sologs/{coll}-{v}.log"
        rows = sweep.parse_rows(open(p).read()) if os.path.exists(p) else []
        last = max((r["cycle"] for r in rows), default=-1)
        res[v] = {r["bytes"]: (r["oop_time_us"], r["oop_wrong"]) for r in rows if r["cycle"] == last}
    sizes = sorted({b for d in res.values() for b in d})
    print(f"\n{coll}: out-of-place time (us) in the last pass, one process for 4 GPUs")
    print("| variant | " + " | ".join(f"{b >> 20} MiB" for b in sizes) + " |")
    print("| --- |" + " ---: |" * len(sizes))
    for v in order:
        print(f"| {v} | " + " | ".join(f"{res[v][b][0]:.1f}" if b in res[v] else "-" for b in sizes) + " |")
for coll in ("allgather", "allreduce"):
    seen = {}
    for r in sweep.trace_records(glob.glob("/tmp/sotraces/observe*.jsonl"), "time"):
        if r.get("coll") == coll and r.get("rank") == 0:
            seen.setdefault(r["bytes"], set()).add(f'{r["nccl_algo"]}/{r["nccl_proto"]}/{r["nccl_channels"]}')
    print(coll, "NCCL's choice:", {b >> 20: sorted(c) for b, c in sorted(seen.items())})
EOF
tar -C /tmp -czf "$OUT/sologs.tgz" sologs sotraces
echo "total ${SECONDS} s"
