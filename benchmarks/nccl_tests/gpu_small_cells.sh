#!/usr/bin/env bash
# GPU call (issue 3, roadmap item 5): why the 1 MiB cells lose under `autoccl run --mode online
# --channel-ceiling 64`. Per launch kind (one process per GPU, one process for all GPUs) and collective
# (all_gather, all_reduce, reduce), 1-4 MiB, -w 200 -n 40 -N 3 -c 1, two repetitions, interleaved:
#   plain        NCCL alone
#   ctas64       NCCL alone on 64-channel communicators (NCCL_MIN_CTAS=NCCL_MAX_CTAS=64)
#   idle         the plugin loaded, no decision, no timing (mode table, empty cache, AUTOCCL_MEASURE_CALLS=0)
#   idle64       the same on 64-channel communicators (--channel-ceiling 64)
#   online       mode online, NCCL's channel count
#   online64     mode online, --channel-ceiling 64 (what the cycles check runs)
#   idle64cap, online64cap   idle64, online64 with --nccl-channels <the plain communicator's count, read
#                from NCCL's INFO line "<N> coll channels">: calls left to NCCL as on a plain communicator
# VARIANTS="..." picks the variants (default: the first six).
# Raw nccl-tests output under $OUT/logs, plugin traces under $OUT/traces (online variants, rep 1); NCCL's
# INFO lines of one plain and one ctas64 run (channel counts) under $OUT/info. Analysis here:
#   tar -xzf small_cells.tgz -C D && python3 benchmarks/nccl_tests/small_cells.py D
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
mkdir -p "$OUT/logs" "$OUT/traces" "$OUT/info" /tmp/tr
left() { echo $(( ${CALL_LIMIT_S:-400} - SECONDS )); }
AC="python3 -m autoccl run"
CTAS64=(env NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64)
NT_ARGS=(-b 1M -e 4M -f 2 -w 200 -n 40 -N 3 -c 1)

nt_cmd() {  # launch coll -> the nccl-tests command line
  if [ "$1" = mpi ]; then echo "mpirun -np $NGPU $NT_BIN/${2}_perf_mpi ${NT_ARGS[*]} -g 1"
  else echo "$NT_BIN/${2}_perf ${NT_ARGS[*]} -g $NGPU"; fi
}

# channel counts NCCL reports at init and per collective, plain vs 64-channel communicators
for v in plain ctas64; do
  pre=(); [ $v = ctas64 ] && pre=("${CTAS64[@]}")
  NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING timeout 60 "${pre[@]}" \
    mpirun -np "$NGPU" "$NT_BIN/all_reduce_perf_mpi" -b 1M -e 1M -w 1 -n 2 -g 1 > "$OUT/info/$v.txt" 2>&1
done
NCCL_CH=$(grep -oE "[0-9]+ coll channels" "$OUT/info/plain.txt" | head -1 | cut -d' ' -f1)
echo "plain communicators: ${NCCL_CH:-?} coll channels" | tee "$OUT/info/nccl_channels.txt"

for rep in 1 2; do
  for launch in mpi single; do
    for coll in all_gather all_reduce reduce; do
      for v in ${VARIANTS:-plain ctas64 idle idle64 online online64}; do
        [ "$(left)" -lt 15 ] && { echo "budget reached at $launch $coll $v rep $rep"; break 4; }
        rm -rf /tmp/cache-empty /tmp/cache-run
        tr=/tmp/tr/$launch-$coll-$v-$rep
        case $v in
          plain) pre=() ;;
          ctas64) pre=("${CTAS64[@]}") ;;
          idle) pre=(env AUTOCCL_MEASURE_CALLS=0 $AC --mode table --cache-dir /tmp/cache-empty --trace "$tr" --) ;;
          idle64) pre=(env AUTOCCL_MEASURE_CALLS=0 $AC --mode table --cache-dir /tmp/cache-empty --channel-ceiling 64 --trace "$tr" --) ;;
          online) pre=(env AUTOCCL_CACHE_DIR=/tmp/cache-run $AC --mode online --trace "$tr" --) ;;
          online64) pre=(env AUTOCCL_CACHE_DIR=/tmp/cache-run $AC --mode online --channel-ceiling 64 --trace "$tr" --) ;;
          idle64cap) pre=(env AUTOCCL_MEASURE_CALLS=0 $AC --mode table --cache-dir /tmp/cache-empty --channel-ceiling 64
                          --nccl-channels "$NCCL_CH" --trace "$tr" --) ;;
          online64cap) pre=(env AUTOCCL_CACHE_DIR=/tmp/cache-run $AC --mode online --channel-ceiling 64
                            --nccl-channels "$NCCL_CH" --trace "$tr" --) ;;
        esac
        t0=$SECONDS
        # shellcheck disable=SC2046
        timeout 90 "${pre[@]}" $(nt_cmd $launch $coll) > "$OUT/logs/$launch-$coll-$v-$rep.txt" 2>&1
        echo "$launch $coll $v rep $rep: rc=$? $((SECONDS - t0)) s"
        if [ $rep = 1 ] && [[ $v == online* ]]; then
          mkdir -p "$OUT/traces/$launch-$coll-$v" && mv "$tr"*.jsonl "$OUT/traces/$launch-$coll-$v/" 2>/dev/null
        fi
        rm -f "$tr"*.jsonl
      done
    done
  done
done
echo "done in $SECONDS s"
# the device returns a bounded number of files: one archive
tar -czf "$OUT/small_cells.tgz" -C "$OUT" logs traces info && rm -rf "$OUT/logs" "$OUT/traces" "$OUT/info"
