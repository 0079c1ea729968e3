#!/usr/bin/env bash
# GPU check: why the 1 MiB cells lose under `autoccl run --mode online
# --channel-ceiling 64`. Per launch kind (one process per GPU, one process for all GPUs) and collective,
# nccl-tests $NT_ARGS (default -b 1M -e 4M -f 2 -w 200 -n 40 -N 3 -c 1), $REPS repetitions (default 2),
# interleaved:
#   plain        NCCL alone
#   ctas64       NCCL alone on 64-channel communicators (NCCL_MIN_CTAS=NCCL_MAX_CTAS=64)
#   ctasN        NCCL alone with NCCL_MIN_CTAS=NCCL_MAX_CTAS=<the plain communicator's count>
#   idle         the plugin loaded, no decision, no timing (mode table, empty cache, AUTOCCL_MEASURE_CALLS=0)
#   idle64       the same on 64-channel communicators (--channel-ceiling 64)
#   idleN        the same with --channel-ceiling <the plain count> (the variables set, the count unchanged)
#   online       mode online, NCCL's channel count
#   online64     mode online, --channel-ceiling 64 (what the cycles check runs)
#   idle64cap, idle32cap, online64cap   idle64, idle with --channel-ceiling 32, online64 with
#                --nccl-channels <the plain communicator's count, read from NCCL's INFO line "<N> coll
#                channels">: calls left to NCCL as on a plain communicator
#   table64cap   mode table on the table the preceding online64cap run of the same repetition saved (list it
#                after online64cap): its configurations without search, coordinator or timing
# VARIANTS="..." picks the variants (default: the first six), LAUNCHES="mpi single", COLLS="all_gather
# all_reduce reduce". INFO_VARIANTS (default "plain ctas64"): one all_gather and one all_reduce 1 MiB run
# each with NCCL_DEBUG_SUBSYS=INIT,TUNING (NCCL's choice per call: algorithm, protocol, channels).
# Raw nccl-tests output under $OUT/logs, plugin traces under $OUT/traces (online variants, rep 1); NCCL's
# INFO lines under $OUT/info. Analysis here:
#   tar -xzf small_cells.tgz -C D && python3 benchmarks/nccl_tests/small_cells.py D
source benchmarks/nccl_tests/setup_gpu.sh || exit 1
source benchmarks/nccl_tests/plugin_build.sh || exit 1
cp COMMIT "$OUT/commit.txt" 2>/dev/null || true
mkdir -p "$OUT/logs" "$OUT/traces" "$OUT/info" /tmp/tr
left() { echo $(( ${CALL_LIMIT_S:-400} - SECONDS )); }
AC="python3 -m autoccl run"
read -r -a NT_ARGS <<< "${NT_ARGS:--b 1M -e 4M -f 2 -w 200 -n 40 -N 3 -c 1}"

nt_cmd() {  # launch coll args... -> the nccl-tests command line
  local launch=$1 coll=$2; shift 2
  if [ "$launch" = mpi ]; then echo "mpirun -np $NGPU $NT_BIN/${coll}_perf_mpi $* -g 1"
  else echo "$NT_BIN/${coll}_perf $* -g $NGPU"; fi
}

# variant trace -> PRE: the command prefix of that variant
variant_pre() {
  local v=$1 tr=$2 idle=(env AUTOCCL_MEASURE_CALLS=0 $AC --mode table --cache-dir /tmp/cache-empty)
  local online=(env AUTOCCL_CACHE_DIR=/tmp/cache-run $AC --mode online)
  case $v in
    plain) PRE=() ;;
    ctas64) PRE=(env NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64) ;;
    ctasN) PRE=(env NCCL_MIN_CTAS="$NCCL_CH" NCCL_MAX_CTAS="$NCCL_CH") ;;
    idle) PRE=("${idle[@]}" --trace "$tr" --) ;;
    idle64) PRE=("${idle[@]}" --channel-ceiling 64 --trace "$tr" --) ;;
    idleN) PRE=("${idle[@]}" --channel-ceiling "$NCCL_CH" --trace "$tr" --) ;;
    idle64cap) PRE=("${idle[@]}" --channel-ceiling 64 --nccl-channels "$NCCL_CH" --trace "$tr" --) ;;
    idle32cap) PRE=("${idle[@]}" --channel-ceiling 32 --nccl-channels "$NCCL_CH" --trace "$tr" --) ;;
    online) PRE=("${online[@]}" --trace "$tr" --) ;;
    online64) PRE=("${online[@]}" --channel-ceiling 64 --trace "$tr" --) ;;
    online64cap) PRE=("${online[@]}" --channel-ceiling 64 --nccl-channels "$NCCL_CH" --trace "$tr" --) ;;
    table64cap) PRE=(env AUTOCCL_MEASURE_CALLS=0 $AC --mode table --cache-dir /tmp/cache-run --channel-ceiling 64
                     --nccl-channels "$NCCL_CH" --trace "$tr" --) ;;
    *) echo "unknown variant $v" >&2; return 1 ;;
  esac
}

# the plain communicator's channel count (NCCL's INFO line), then NCCL's choices per variant at 1 MiB
NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT timeout 60 mpirun -np "$NGPU" "$NT_BIN/all_reduce_perf_mpi" -b 1M -e 1M \
  -w 1 -n 1 -g 1 > "$OUT/info/count.txt" 2>&1
NCCL_CH=$(grep -oE "[0-9]+ coll channels" "$OUT/info/count.txt" | head -1 | cut -d' ' -f1)
echo "plain communicators: ${NCCL_CH:-?} coll channels" | tee "$OUT/info/nccl_channels.txt"
[ -n "$NCCL_CH" ] || { echo "no channel count in NCCL's INFO output"; exit 1; }
for v in ${INFO_VARIANTS:-plain ctas64}; do
  for coll in all_gather all_reduce; do
    rm -rf /tmp/cache-empty /tmp/cache-run
    variant_pre "$v" /tmp/tr/info || exit 1
    # shellcheck disable=SC2046
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING timeout 60 "${PRE[@]}" $(nt_cmd mpi $coll -b 1M -e 1M -w 1 -n 2) \
      > "$OUT/info/$v-$coll.txt" 2>&1
  done
  rm -f /tmp/tr/info*.jsonl
done

for rep in $(seq 1 "${REPS:-2}"); do
  for launch in ${LAUNCHES:-mpi single}; do
    for coll in ${COLLS:-all_gather all_reduce reduce}; do
      for v in ${VARIANTS:-plain ctas64 idle idle64 online online64}; do
        [ "$(left)" -lt 15 ] && { echo "budget reached at $launch $coll $v rep $rep"; break 4; }
        rm -rf /tmp/cache-empty
        [ "$v" = table64cap ] || rm -rf /tmp/cache-run  # table64cap reads what online64cap saved
        tr=/tmp/tr/$launch-$coll-$v-$rep
        variant_pre "$v" "$tr" || exit 1
        t0=$SECONDS
        # shellcheck disable=SC2046
        timeout 90 "${PRE[@]}" $(nt_cmd $launch $coll "${NT_ARGS[@]}") > "$OUT/logs/$launch-$coll-$v-$rep.txt" 2>&1
        echo "$launch $coll $v rep $rep: rc=$? $((SECONDS - t0)) s"
        if [ "$rep" = 1 ] && [[ $v == online* || $v == table* ]]; then
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
