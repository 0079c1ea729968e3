#!/usr/bin/env bash
# GPU call: is P2P read (NCCL_P2P_READ_ENABLE=1, a per-communicator knob NCCL leaves off on Hopper: its INFO
# lines say "via P2P/CUMEM", not ".../read") worth a start-up setting? nccl-tests, one process for all GPUs,
# AG/RS/AR at 4 MiB-1 GiB (the issue's target sizes), -c 1, REPS repetitions interleaved per variant:
#   plain        NCCL alone
#   read         NCCL_P2P_READ_ENABLE=1
#   ctas64       NCCL_MIN_CTAS=NCCL_MAX_CTAS=64 (the tuner's channel ceiling)
#   ctas64read   both
# Logs under $OUT/logs/<variant>-<coll>-<rep>.txt; the table (median busbw per cell over repetitions, ratio to
# plain, geometric mean over the 15 cells) in $OUT/table.md.
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
REPS=${REPS:-3}
VARIANTS=${VARIANTS:-plain read ctas64 ctas64read}
mkdir -p "$OUT/logs"
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT NCCL_P2P_READ_ENABLE=1 "$NT_BIN/all_reduce_perf" -b 1M -e 1M -w 1 -n 1 \
  -g "$NGPU" 2>&1 | grep -m 2 "via P2P" > "$OUT/read_transport.txt"
for rep in $(seq 1 "$REPS"); do
  for coll in all_gather reduce_scatter all_reduce; do
    for v in $VARIANTS; do
      env_v=()
      case $v in
        read) env_v=(NCCL_P2P_READ_ENABLE=1) ;;
        ctas64) env_v=(NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64) ;;
        ctas64read) env_v=(NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64 NCCL_P2P_READ_ENABLE=1) ;;
      esac
      env "${env_v[@]}" timeout 120 "$NT_BIN/${coll}_perf" -b 4M -e 1G -f 4 -w 10 -n 30 -c 1 -g "$NGPU" \
        > "$OUT/logs/$v-$coll-$rep.txt" 2>&1 || echo "FAILED $v $coll $rep rc=$?" | tee -a "$OUT/failures.txt"
    done
  done
done
python3 - "$OUT" $VARIANTS <<'PY' > "$OUT/table.md"
import math, re, statistics, sys
from pathlib import Path
out, variants = Path(sys.argv[1]), sys.argv[2:]
bw = {}  # (variant, coll, bytes) -> [busbw out-of-place]
wrong = 0
for f in sorted((out / "logs").glob("*.txt")):
    v, coll, _ = f.stem.rsplit("-", 2)
    for line in f.read_text().splitlines():
        cols = line.split()
        if len(cols) >= 13 and re.fullmatch(r"\d+", cols[0]):
            bw.setdefault((v, coll, int(cols[0])), []).append(float(cols[7]))
            wrong += cols[8] != "0" or cols[12] != "0"
print(f"rows with wrong results: {wrong}\n")
print("| collective | size | " + " | ".join(variants) + " |")
print("| --- | ---: | " + " | ".join("---:" for _ in variants) + " |")
ratios = {v: [] for v in variants}
for coll in ("all_gather", "reduce_scatter", "all_reduce"):
    for size in sorted({k[2] for k in bw if k[1] == coll}):
        base = statistics.median(bw[("plain", coll, size)])
        cells = []
        for v in variants:
            vals = bw.get((v, coll, size), [])
            if not vals:
                cells.append("-"); continue
            m = statistics.median(vals)
            ratios[v].append(m / base)
            cells.append(f"{m:.1f}" if v == "plain" else f"{m:.1f} ({m / base:.3f}×)")
        print(f"| {coll} | {size >> 20} MiB | " + " | ".join(cells) + " |")
print()
for v in variants:
    r = ratios[v]
    if r:
        print(f"- {v}: geometric mean over {len(r)} cells {math.exp(sum(map(math.log, r)) / len(r)):.3f}×, min {min(r):.3f}×")
PY
cat "$OUT/table.md"
