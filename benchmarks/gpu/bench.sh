#!/usr/bin/env bash
# On a GPU machine: set it up (benchmarks/gpu/setup.sh: nccl-tests and MPICH from the carried .carry/ and .whl/,
# the plugin built from this checkout) and run the benchmark plans named in PLANS, each a sequence of the product's
# own commands (`autoccl bench nccl-tests|coll|train`): a user with a GPU node runs the same commands we do. Results go to
# $OUT/<plan>/ and, tarred, to $OUT/<plan>.tgz (the tool brings back few files); $OUT/machine.txt, commit.txt and
# source-digest.txt (benchmarks/gpu/source_digest.sh: which sources ran) say where and what.
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
#   contention  the contention law the emulator computes with (docs/emulator.md): `autoccl bench coll`'s oracle
#             (ring, LL/LL128/Simple at 8, 16, 32 and 64 channels) at AG/RS/AR 16 MiB-256 MiB beside no, light and
#             heavy GEMM load, then `python -m autoccl.emu.calibrate` refits the model from it (needs scipy:
#             the `calibrate` extra) into $OUT/contention/perfmodel.json; CONT_SIZES narrows it
#   check     `autoccl bench coll --check`: every collective's result against a reference, plain and online
#   train     `autoccl bench train` (TRAIN_PRESET, default 350m; FSDP2 and DDP; plain NCCL then online) repeated
#             TRAIN_ITERS iterations a launch (default 400: in 100 the search and the step guard's rounds ran
#             to the last iteration, see `search_end_iter` in the report), while TRAIN_PAIR_S seconds
#             (default 240, about one 350m pair of 400 iterations on 2 GPUs) are left,
#             TRAIN_PAIRS times (default 2): interleaved launch pairs, each online launch starting cold, every
#             second pair launching its modes in reverse order (online before plain NCCL: a machine that slows
#             or warms over a pair then weighs on both sides; train-pairs reports each order's median);
#             TRAIN_MODES (default nccl,online; add manual for the resource-sharing study's policy,
#             online-arms for online with the step guard's arms, TRAIN_STEP_ARMS, default hidden=2,8 (an arm
#             may name a protocol: "hidden=2,simple,2/simple");
#             "hidden=2;estimated=2" adds the arm that caps what the exposure estimate calls hidden);
#             TRAIN_EXTRA: more `bench train` options (e.g. the exposure check on NVLink, one pair of online alone:
#             TRAIN_PAIRS=1 TRAIN_MODES=online TRAIN_EXTRA="--online-setting AUTOCCL_EXPOSURE_EVERY=8 --torch-profile 8")
#   small     the 1-4 MiB cells alone with 10x the calls per average (SMALL_SIZES, SMALL_ITERS; default -b 1M
#             -e 4M -f 2, -w 20 -n 400): plain, online, table-warm (table mode on online's table) and idle, to
#             tell online's own cost per call at 1 MiB from launches whose 40-call average held a host stall
#   loaded-split  what being loaded costs per call at 1-4 MiB, the tuner and the profiler apart: plain, idle (both
#             loaded, nothing applied; table mode times each task's first AUTOCCL_MEASURE_CALLS calls, which nccl-tests'
#             warm-up takes), idle with no call timed, the tuner alone and the profiler alone, each in table mode on
#             an empty cache, with SMALL_SIZES / SMALL_ITERS as the small plan (on 2 x H200 the loaded plugin's 1 MiB
#             averages were ~0.5-1 us a call slower with one process per GPU; this says where it comes from)
#   mintask   online beside online with AUTOCCL_MIN_TASK_US_TCP=50 (default 200 us: with one process per GPU on 4 GPUs
#             every all_gather and reduce_scatter up to 64 MiB keeps NCCL's choice, where the fixed-mode oracle found
#             ring/LL128 1.13-1.27x at 4-16 MiB), traced, MINTASK_SIZES (default -b 4M -e 64M -f 2)
#   probekeep  online beside online with AUTOCCL_PROBE_KEEP_PCT=$PROBE_KEEP_PCT (default 3: pairs more than 3 %
#             behind after their first probe explored no further; 30 did nothing on 2 x H200, and in its traces the
#             fewer-channel points of pairs 3 % behind cost 1.6-2.2 % of the cold loop and never won:
#             benchmarks/results/h200x2/probe-keep), traced: the cold pass (pass 0, -p of at least 2) is where it
#             shows; benchmarks/nccl_tests/cold_pass_cost.py splits its loop's time by what the calls ran
#   verifywait  online beside online with AUTOCCL_VERIFY_WAIT=16 (the table's config waits for the verification's
#             verdict in one 16-call segment instead of call by call: on 2 x H200 with one process per GPU every tuned
#             task of every warm launch looked up its plan at calls 18-22, the last waiting 0.5-1.1 ms in the timed
#             loop), traced: the warm passes (1 and later) are where it shows, in the traces' slow_lookups
#   probefirst  online (each pair's first probe one call until its sample is back, the rest of its 3-call block only
#             within 30 % of the incumbent: the default) beside online with AUTOCCL_PROBE_CALLS=3 (the whole block at
#             once), traced: over sockets on one H200 the cold loop at 128 MiB-1 GiB ran 1.05-1.07x NCCL's kernel time
#             against 1.56x (benchmarks/results/h200x1/probe-first-hosts); the cold pass (pass 0) is where it shows
#   stepfirst  online (the default: each descent point a 3-call block) beside online with AUTOCCL_STEP_CALLS=1 (the
#             points of a pair trailing the best by more than 10 %, stepped to or speculated, one call until its
#             sample is back, the rest of the block only within 30 % of the incumbent), traced: the cold pass (pass 0)
#             is where it shows, in cold-pass-<mode>.md's "narrower, lost" class
#   skipbehind  online beside online with AUTOCCL_SKIP_BEHIND_PCT=0 (every pair probed at each start, as before the
#             table's pair records), each mode with its own cache, traced: over sockets on one H200 the warm passes
#             of tasks whose cold search ended without a lead probed ring/LL again at 3.7x NCCL's time; the warm
#             passes (1 and later) are where it shows, the task records' skipped_behind say which pairs were left out
#   recordedstart  online beside online with AUTOCCL_RECORDED_START=off (every pair a warm start probes, probed
#             first at the widest channel count instead of at its recorded best point), each mode with its own
#             cache, traced: the warm passes' tasks that search again (no table entry) are where it shows, the task
#             records' recorded_starts say how many pairs started from their records (on NVLink; over sockets NCCL
#             caps the widest probe to its own 2 channels, so it changes little there)
#   allowanceonce  online beside online with AUTOCCL_ALLOWANCE_ONCE=off (a task searched again at every start gets
#             a fresh regret allowance), each mode with its own cache, traced: from pass 1 on, the tasks whose cold
#             search ended without a lead; the task records' regret_allowance say which had none (PASSES >= 3)
#   waitregret  online beside online with AUTOCCL_WAIT_REGRET=on (a rank's wait for an exploring task's plan, over TCP a
#             round trip to the authority, counted into the task's regret), each mode with its own cache, traced: with
#             one process per rank (or two hosts of one GPU) the cold pass (pass 0) is where it shows; the task records'
#             wait_regret_us and regret_stop say what the waits cost and which searches they ended
#   earned    online (the default: each task's regret allowance whole from its first call) beside online with
#             AUTOCCL_REGRET_EARN_PCT=$EARN_PCT (default 5: the allowance earned on the task's calls, the calls in
#             flight charged at an estimate), each mode with its own cache, traced: short loops (-w 1 -n 20, nccl-tests' default; -w 5 -n 10) are where
#             it shows, the task records' regret_us, regret_waits and regret_stop say what exploring cost
#   unproven  online beside online with AUTOCCL_UNPROVEN_CALLS=$UNPROVEN_CALLS (default 3: at most that many calls of
#             unmeasured configurations in flight while the plan runs ahead of its samples) and online with
#             AUTOCCL_SPECULATE=off (no speculated points while samples are in flight), traced: on one H200 over
#             sockets it moved the widest probes from the untimed warm-up into the timed loops (0.840x plain against
#             0.963x, benchmarks/results/h200x1/blind-exploration); on NVLink, whether it cuts the timed loops' tails
#   promise   the bars of "never slower than NCCL": plain, online (cold in pass 0, warm after), table mode
#             started from online's table of the same pass (table-warm), observe and idle, traced (idle: over
#             sockets on one H200 online's warm passes leaned below the idle plugin, 0.985x over 16 runs, 12 of them
#             below 1: benchmarks/results/h200x1/online-warm-vs-idle; pool_modes.py reads the same from these folders)
#   plugins   one `autoccl run --` nccl-tests job (all_reduce 1-64 MiB, -c 1) with NCCL_DEBUG=INFO: the tuner and
#             profiler interface versions this NCCL took from the plugin (GPU_NCCL: a newer NCCL), the results checked
#   inspector NCCL Inspector (built from its carried source) chained behind autoccl's profiler with autoccl's
#             metrics on, NCCL_DEBUG=INFO: both write their files, prometheus_client parses ours; then the
#             metrics' cost on a 1 MiB all_reduce (online against online with metrics every second, interleaved;
#             METRICS_PASSES, default 4, 0: none; METRICS_WARMUP warm-up calls, default 20: with one process per GPU the
#             task is settled, over TCP, at a call that varies run to run, so -w 100 times calls after it;
#             METRICS_TRACE=1 traces each launch, whose task record says when it was settled)
#   train-ceiling  as train with PARALLEL (e.g. fsdp2), each pair run twice: default and --channel-ceiling 0
#   resilience  `autoccl bench train --resilience both`: DDP 350m (TRAIN_PRESET) on 2 GPUs, rank 1 slowed to 2-5x
#             its step on 20 % of the steps (RES_ITERS, default 500), synchronous against the resilient reducer,
#             clean and injected (docs/resilience.md; 2 x H200: benchmarks/results/h200x2/resilience);
#             RES_AGENT_STREAM=1 gives every resilience plan `--agent-stream` (the reducer's own CUDA stream)
#   resilience-stream  the resilient reducer's clean-run cost beside synchronous DDP, its agent on the training
#             stream and on its own (`--agent-stream`), RES_STREAM_ROUNDS rounds of both (default 2, order swapped
#             each round), RES_ITERS steps (default 300), ~50 s a launch of the 350m model on 2 GPUs; with
#             TORCH_CUDA_SANITIZER=1 in the environment PyTorch's stream sanitizer checks the agent's own stream
#             (that variant alone; ~1.5 s a step of 350m: a correctness run with RES_ITERS ~24, not a timing one)
#   resilience-kill  `--resilience on --kill 1:100` over 200 steps (RES_STEPS; the kill at half): the survivor
#             must go on within 30 s (the "lost at step" line of rank 0's log, train[].resilience.recoveries),
#             bounded by RES_KILL_S (default 240)
#   resilience-rejoin  as resilience-kill with `--rejoin` over 3 x RES_STEPS steps: the replacement for rank 1
#             joins the survivor over NCCL (the grown group made directly, the state sent GPU to GPU); the
#             resilience table's "back at step N", both ranks' final weights alike
#   train-hosts  `autoccl bench train` on two "hosts" of one GPU (NCCL_HOSTID, sockets over loopback, as
#             hosts_on_one_gpu.sh), each host's harness under its own `torchrun --nnodes 2`: the multi-host launch,
#             the coordinator torchrun's variables derive; TRAIN_PRESET (default 125m), PARALLEL (default ddp,fsdp2),
#             TRAIN_ITERS (default 300), online on NCCL's own channels (--channel-ceiling 0: the channel probe needs
#             two GPUs); TRAIN_EXTRA: more `bench train` options (e.g. --trace)
#   configs   every configuration the tuner can force, under nccl-tests' own data check: one `bench nccl-tests`
#             mode per (algorithm, protocol[, channels]) in fixed mode (every call timed, so its trace says what NCCL
#             ran), beside plain and online, `-c 1 -d all -o all` (every dtype and reduction) at odd sizes 1000 B to
#             32 MB (-f 8), one pass; CONFIG_SWEEPS picks the parts (default ring,tree,pat: ring on all five
#             collectives with plain and online, tree on all_reduce and all_gather, PAT on all_gather, reduce_scatter
#             and all_reduce; an algorithm a collective lacks shows NCCL refusing it; CONFIG_COLLS replaces each
#             part's collectives, CONFIG_SIZES its sizes); config_sweep.py's table
#   netcheck  plain nccl-tests all_reduce 1-16 MiB through --launch mpi with NCCL_DEBUG=INFO: the transport NCCL
#             chose (its "via" lines) and -c 1's verdict, before the other plans measure on it
# HOSTS_ON_ONE_GPU=1: the resilience plans run as train-hosts does, two hosts of GPU 0 (TRAIN_PRESET 125m fits
#   their socket transport): a lost rank, its replacement and the straggler over NCCL where one GPU is lent
# MPIRUN=benchmarks/gpu/hosts_on_one_gpu.sh RANKS=2 LAUNCH=mpi: on one GPU, two ranks that NCCL sees as two hosts
#   (network transport over loopback sockets): the nccl-tests plans then run on a multi-host kind of communicator.
#   Two processes on one GPU take turns on it (time slices of ~2.3 ms: every step of a collective that waits for the
#   other rank waits for a slice); MPS=1 runs the call under an MPS server of its own (a user-space daemon started
#   and quit here; the card's settings are untouched) so that both ranks' kernels run at once.
# NCCL other than the image's: GPU_NCCL=DIR (benchmarks/gpu/setup.sh); a registry wheel too large to carry at
#   once arrives in parts over several warm calls (benchmarks/gpu/carry_parts.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$SECONDS
BUDGET_S=${BUDGET_S:-540}
source benchmarks/gpu/setup.sh || exit 1
source benchmarks/gpu/hosts_env.sh
git rev-parse HEAD > "$OUT/commit.txt" 2>/dev/null || true
bash benchmarks/gpu/source_digest.sh > "$OUT/source-digest.txt"  # which code ran, whatever .git says
echo "setup done at $((SECONDS - T0)) s"
if [ "${MPS:-0}" = 1 ]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/autoccl-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/autoccl-mps/log
  mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
  echo quit | nvidia-cuda-mps-control > /dev/null 2>&1  # one left by an earlier call that was killed
  nvidia-cuda-mps-control -d || { echo "MPS=1: nvidia-cuda-mps-control -d failed"; exit 1; }
  trap 'echo quit | nvidia-cuda-mps-control; cp -r "$CUDA_MPS_LOG_DIRECTORY" "$OUT/mps-log" 2>/dev/null' EXIT
  echo "MPS server started" | tee -a "$OUT/machine.txt"
fi
LAUNCH=${LAUNCH:-single,mpi}
PASSES=${PASSES:-2}
COLLS=${COLLS:-all_gather,reduce_scatter,all_reduce}
SIZES=${SIZES:--b 1M -e 1G -f 2}
ITERS=${ITERS:--w 20 -n 40}
MPIRUN=${MPIRUN:-mpirun}
RANKS_ARG=(); [ -n "${RANKS:-}" ] && RANKS_ARG=(--gpus "$RANKS")
IDLE64="idle64:--mode table --cache-dir {empty} --channel-ceiling 64 --nccl-channels auto"
# --nccl-channels auto asks a communicator of the visible GPUs; with one GPU (two ranks as two hosts) there is none to
# ask, so the plans leave idle64 out rather than fail its launches
IDLE64_ARGS=(-m "$IDLE64"); [ "$NGPU" -lt 2 ] && IDLE64_ARGS=()
# allreduce_job: sets job=(...) to one all_reduce_perf job for the plans that run one (plugins, inspector): one
# process for the GPUs, or under LAUNCH=mpi's launcher one rank a GPU (one GPU: two ranks as two hosts)
allreduce_job() {
  if [ "${LAUNCH%%,*}" = mpi ]; then job=("$MPIRUN" -np "${RANKS:-$NGPU}" "$NT_BIN/all_reduce_perf_mpi" -g 1)
  else job=("$NT_BIN/all_reduce_perf" -g "$NGPU"); fi
}
# train_on_two_hosts DIR LIMIT_S ARGS...: `autoccl bench train ARGS` on two "hosts" of GPU 0 (hosts_env.sh), each
# host's harness under its own `torchrun --nnodes 2` (the multi-host launch); DIR/host<R>/run and DIR/host<R>.log.
# Host 0 writes the result and may run on after host 1's harness is done (a killed rank's host ends early);
# a host that fails leaves the other waiting for its peer, so it is stopped.
train_on_two_hosts() {
  local dir=$1 limit=$2 port=$((20000 + RANDOM % 10000)) pids=() r code1=
  shift 2
  mkdir -p "$dir"
  for r in 0 1; do
    env "${HOST_ENV[@]}" NCCL_HOSTID="$HOST_ID_PREFIX$r" timeout "$limit" \
      python3 -m torch.distributed.run --nnodes 2 --node-rank $r --nproc-per-node 1 --master-addr 127.0.0.1 \
      --master-port $port -m autoccl bench train "$@" -o "$dir/host$r/run" > "$dir/host$r.log" 2>&1 &
    pids+=($!)
  done
  while kill -0 "${pids[0]}" 2> /dev/null; do
    if [ -z "$code1" ] && ! kill -0 "${pids[1]}" 2> /dev/null; then
      wait "${pids[1]}"; code1=$?
      [ "$code1" != 0 ] && sleep 10 && kill "${pids[0]}" 2> /dev/null
    fi
    sleep 2
  done
  local code0
  wait "${pids[0]}"; code0=$?
  echo "$(basename "$dir"): host 0 exit $code0"
  if [ -z "$code1" ]; then
    kill -0 "${pids[1]}" 2> /dev/null && sleep 10 && kill "${pids[1]}" 2> /dev/null
    wait "${pids[1]}"; code1=$?
  fi
  echo "$(basename "$dir"): host 1 exit $code1"
}
for plan in ${PLANS:-overhead online}; do
  psizes=$SIZES; piters=$ITERS
  case $plan in
    small)  # 1-4 MiB alone, 10x the calls per average: what online costs there beside table mode and idle
      psizes=${SMALL_SIZES:--b 1M -e 4M -f 2}; piters=${SMALL_ITERS:--w 20 -n 400}
      args=(-m plain -m online -m "table-warm:--mode table --cache-dir {cache:online}" -m idle) ;;
    loaded-split)  # NCCL_*_PLUGIN set directly on a plain launch: `autoccl run` would load both
      psizes=${SMALL_SIZES:--b 1M -e 4M -f 2}; piters=${SMALL_ITERS:--w 20 -n 400}
      lib=$(python3 -c 'from autoccl._paths import plugin_path; print(plugin_path())') || exit 1
      empty=$(mktemp -d)
      args=(-m plain -m idle -m "idle-untimed:--mode table --cache-dir {empty} AUTOCCL_MEASURE_CALLS=0"
            -m "tuner-only:plain NCCL_TUNER_PLUGIN=$lib AUTOCCL_MODE=table AUTOCCL_CACHE_DIR=$empty"
            -m "profiler-only:plain NCCL_PROFILER_PLUGIN=$lib AUTOCCL_MODE=table AUTOCCL_CACHE_DIR=$empty") ;;
    probekeep)
      pk=${PROBE_KEEP_PCT:-3}
      args=(-m plain -m online -m "online-pk$pk:--mode online AUTOCCL_PROBE_KEEP_PCT=$pk" --trace) ;;
    verifywait) args=(-m plain -m online -m "online-vw16:--mode online AUTOCCL_VERIFY_WAIT=16" --trace) ;;
    probefirst) args=(-m plain -m online -m "online-p3:--mode online AUTOCCL_PROBE_CALLS=3" --trace) ;;
    stepfirst) args=(-m plain -m online -m "online-s1:--mode online AUTOCCL_STEP_CALLS=1" --trace) ;;
    skipbehind) args=(-m plain -m online -m "online-probeall:--mode online AUTOCCL_SKIP_BEHIND_PCT=0" --trace) ;;
    recordedstart) args=(-m plain -m online -m "online-widest:--mode online AUTOCCL_RECORDED_START=off" --trace) ;;
    waitregret) args=(-m plain -m online -m "online-waits:--mode online AUTOCCL_WAIT_REGRET=on" --trace) ;;
    earned)
      ep=${EARN_PCT:-5}
      args=(-m plain -m online -m "online-earn$ep:--mode online AUTOCCL_REGRET_EARN_PCT=$ep" --trace) ;;
    allowanceonce) args=(-m plain -m online -m "online-every:--mode online AUTOCCL_ALLOWANCE_ONCE=off" --trace) ;;
    unproven) args=(-m plain -m online -m "online-u${UNPROVEN_CALLS:-3}:--mode online AUTOCCL_UNPROVEN_CALLS=${UNPROVEN_CALLS:-3}"
                    -m "online-nospec:--mode online AUTOCCL_SPECULATE=off" --trace) ;;
    mintask)
      psizes=${MINTASK_SIZES:--b 4M -e 64M -f 2}
      args=(-m plain -m online -m "online-mt50:--mode online AUTOCCL_MIN_TASK_US_TCP=50" --trace) ;;
    overhead) [ "$NGPU" -lt 2 ] && echo "plan overhead: idle64 left out (1 GPU: --nccl-channels auto needs 2)"
      args=(-m plain -m idle "${IDLE64_ARGS[@]}" -m observe -m "observe-kernel:--mode observe AUTOCCL_CLOCK=kernel") ;;
    online) args=(-m plain -m online --trace) ;;
    promise) args=(-m plain -m online -m "table-warm:--mode table --cache-dir {cache:online}" -m observe -m idle
                   --trace) ;;
    inspector)
      left=$((BUDGET_S - (SECONDS - T0)))
      if [ "$left" -lt 60 ] || [ -z "${INSPECTOR_SO:-}" ]; then echo "plan inspector skipped: ${left} s left, Inspector '${INSPECTOR_SO:-not built}'"; continue; fi
      ins=$OUT/inspector; mkdir -p "$ins/inspector-dump" "$ins/metrics" "$ins/metrics-overhead"
      allreduce_job  # the chained job
      NCCL_INSPECTOR_ENABLE=1 NCCL_INSPECTOR_DUMP_DIR="$ins/inspector-dump" NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS=200000 \
      AUTOCCL_PROFILER_CHAIN="$INSPECTOR_SO" AUTOCCL_METRICS_DIR="$ins/metrics" AUTOCCL_METRICS_INTERVAL_S=1 \
      AUTOCCL_TRACE="$ins/trace" NCCL_DEBUG=INFO timeout 120 python3 -m autoccl run --cache-dir "$ins/cache" -- \
        "${job[@]}" -b 1M -e 64M -f 2 -w 20 -n 100 -c 1 > "$ins/chained.log" 2>&1
      echo "chained run: exit $?"; grep -E "autoccl|Inspector|inspector" "$ins/chained.log" | head -20
      python3 - "$ins" <<'PY' | tee "$ins/files.md"
import json, sys
from pathlib import Path
from prometheus_client.parser import text_string_to_metric_families
d = Path(sys.argv[1])
dumps = [f for f in (d / "inspector-dump").rglob("*") if f.is_file()]
lines = [ln for f in dumps for ln in f.read_text(errors="replace").splitlines() if ln.strip()]
print(f"Inspector: {len(dumps)} files, {len(lines)} lines; first: {lines[0][:300] if lines else None}")
for f in sorted((d / "metrics").glob("*.prom")):
    fams = list(text_string_to_metric_families(f.read_text()))
    print(f"{f.name}: prometheus_client parsed {len(fams)} families, {sum(len(m.samples) for m in fams)} samples")
for f in sorted((d / "metrics").glob("*.jsonl")):
    recs = [json.loads(ln) for ln in f.read_text().splitlines() if ln.strip()]
    print(f"{f.name}: {len(recs)} JSON records, {sum('task_perf' in r for r in recs)} task_perf")
chain = [json.loads(ln) for f in d.glob("trace*") for ln in f.read_text().splitlines() if '"profiler_chain"' in ln]
print(f"profiler_chain trace records: {json.dumps(chain)[:1500]}")
PY
      [ "${METRICS_PASSES:-4}" = 0 ] || timeout $((BUDGET_S - (SECONDS - T0))) python3 -m autoccl bench nccl-tests --bin "$NT_BIN" --launch "$LAUNCH" \
        --mpirun "$MPIRUN" "${RANKS_ARG[@]}" \
        -c all_reduce -p "${METRICS_PASSES:-4}" -b 1M -e 1M -f 2 -w "${METRICS_WARMUP:-20}" -n 200 --timeout 60 --no-progress \
        ${METRICS_TRACE:+--trace} -o "$ins/overhead" -m plain -m online \
        -m "online-metrics:AUTOCCL_METRICS_DIR=$ins/metrics-overhead AUTOCCL_METRICS_INTERVAL_S=1" 2>&1 | tail -20
      (cd "$OUT" && tar czf inspector.tgz inspector && rm -rf inspector)
      continue ;;
    train-hosts)
      left=$((BUDGET_S - (SECONDS - T0)))
      if [ "$left" -lt 120 ]; then echo "plan $plan skipped: ${left} s left"; continue; fi
      th=$OUT/train-hosts
      train_on_two_hosts "$th" "$left" --preset "${TRAIN_PRESET:-125m}" --parallel "${PARALLEL:-ddp,fsdp2}" \
        --modes "${TRAIN_MODES:-nccl,online}" --step-arms "${TRAIN_STEP_ARMS:-hidden=2,8}" --channel-ceiling 0 \
        -n "${TRAIN_ITERS:-300}" --no-progress ${TRAIN_EXTRA:-}
      tail -n 25 "$th/host0.log"; tail -n 5 "$th/host1.log"
      # --torch-profile's Chrome traces: their truth is in run.json and exposure-truth.md; large ones stay here
      find "$th" -name 'profile-*.json.gz' -size +20M -printf 'left out of the tarball: %p (%s bytes)\n' -delete
      (cd "$OUT" && tar czf train-hosts.tgz train-hosts && rm -rf train-hosts)
      continue ;;
    plugins)  # which tuner and profiler interface versions this NCCL takes from the plugin, in one checked job
      mkdir -p "$OUT/plugins"
      allreduce_job
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV AUTOCCL_TRACE="$OUT/plugins/trace" timeout 180 \
        python3 -m autoccl run --cache-dir "$OUT/plugins/cache" -- "${job[@]}" -b 1M -e 64M -f 4 -w 20 -n 60 -c 1 \
        > "$OUT/plugins/job.log" 2>&1
      echo "plugins: exit $?"
      grep -m1 -E "NCCL version" "$OUT/plugins/job.log"
      grep -iE "plugin|autoccl" "$OUT/plugins/job.log" | sed -E 's/^[^ ]+ [0-9]+:[0-9]+ \[[0-9]+\] //' | sort | uniq -c \
        | sort -rn | head -25
      grep -E "Avg bus|wrong|#  *[0-9]+ " "$OUT/plugins/job.log" | tail -12
      (cd "$OUT" && tar czf plugins.tgz plugins && rm -rf plugins)
      continue ;;
    configs)
      read -ra csizes <<<"${CONFIG_SIZES:--b 1000 -e 32M -f 8} -w 2 -n 2"
      sweeps=()
      cs=${CONFIG_SWEEPS:-ring,tree,pat}
      for part in ${cs//,/ }; do
        fx=()  # fixed-mode modes: every call timed (AUTOCCL_MEASURE_CALLS), so the trace holds what each one ran
        fixed() { fx+=(-m "$1:--mode fixed --fixed *:$2 ${3:-} AUTOCCL_MEASURE_CALLS=1000000"); }
        case $part in
          ring) colls=all_reduce,all_gather,reduce_scatter,broadcast,reduce; fx=(-m plain -m online)
                for p in ll ll128 simple; do fixed "ring-$p" "ring/$p"; fixed "ring-$p-1ch" "ring/$p/1"; done
                fixed ring-simple-8ch ring/simple/8 "--channel-ceiling 8"; fixed ring-ll-8ch ring/ll/8 "--channel-ceiling 8" ;;
          tree) colls=all_reduce,all_gather; fx=(-m plain)
                for p in ll ll128 simple; do fixed "tree-$p" "tree/$p"; fixed "tree-$p-1ch" "tree/$p/1"; done ;;
          pat)  colls=all_gather,reduce_scatter,all_reduce; fx=(-m plain)
                fixed pat-simple pat/simple; fixed pat-simple-1ch pat/simple/1; fixed pat-ll pat/ll ;;
          *) echo "configs: unknown part $part (ring, tree, pat)"; continue ;;
        esac
        colls=${CONFIG_COLLS:-$colls}
        left=$((BUDGET_S - (SECONDS - T0)))
        if [ "$left" -lt 60 ]; then echo "configs $part skipped: ${left} s left"; continue; fi
        timeout "$left" python3 -m autoccl bench nccl-tests --bin "$NT_BIN" --launch "$LAUNCH" -c "$colls" -p 1 \
          "${csizes[@]}" --nt-args "-d all -o all" --trace --timeout 120 --no-progress --mpirun "$MPIRUN" \
          "${RANKS_ARG[@]}" -o "$OUT/configs/$part" "${fx[@]}" 2>&1 | grep -vE '^\|' | tail -8
        sweeps+=("$OUT/configs/$part")
      done
      [ "${#sweeps[@]}" -gt 0 ] && python3 benchmarks/nccl_tests/config_sweep.py "${sweeps[@]}" \
        --json "$OUT/configs/sweep.json" | tee "$OUT/configs/sweep.md" | tail -12
      (cd "$OUT" && tar czf configs.tgz --exclude='configs/*/cache' configs && rm -rf configs)
      continue ;;
    netcheck)
      mkdir -p "$OUT/netcheck"
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET timeout 120 "$MPIRUN" -np "${RANKS:-$NGPU}" "$NT_BIN/all_reduce_perf_mpi" \
        -g 1 -b 1M -e 16M -f 4 -w 5 -n 20 -c 1 > "$OUT/netcheck/plain.log" 2>&1
      echo "netcheck: exit $?"
      grep -E "via|NET/|Using network|wrong|Avg bus|#  *[0-9]+ " "$OUT/netcheck/plain.log" | sort | uniq -c | sort -rn | head -25
      continue ;;
    design) args=(-m plain "${IDLE64_ARGS[@]}" -m online --trace) ;;
    plain64) args=(-m plain -m "plain64:plain NCCL_MIN_CTAS=64 NCCL_MAX_CTAS=64") ;;
    custom) eval "args=(${BENCH_ARGS:-})" ;;
    coll|check|contention)
      left=$((BUDGET_S - (SECONDS - T0)))
      if [ "$left" -lt 60 ]; then echo "plan $plan skipped: ${left} s left"; continue; fi
      if [ "$plan" = contention ]; then
        cargs=(--colls ag,rs,ar --sizes "${CONT_SIZES:-16M:256M:x4}" --dtype bf16 --load none,light,heavy
               -w 5 -n 20 -r 3 --modes nccl,oracle --sweep-iters 10 --sweep-reps 3 --oracle-algos ring
               --oracle-channels 8,16,32,64)
      elif [ "$plan" = coll ]; then
        cargs=(--colls ag,rs,ar --sizes "${COLL_SIZES:-4M:1G:x4}" --dtype bf16 --load "${COLL_LOADS:-none,light,heavy}"
               -w 5 -n 20 -r 5 --modes nccl,online,static-best,oracle --online-warmup 200 --sweep-iters 10
               --sweep-reps 3 --oracle-channels "${ORACLE_CHANNELS:-auto,16,32,64}")
      else
        cargs=(--colls all --sizes 1M:256M:x16 --dtype bf16 --check -w 2 -n 5 -r 3 --modes nccl,online --online-warmup 50)
      fi
      mkdir -p "$OUT/$plan"
      timeout "$left" python3 -m autoccl bench coll "${cargs[@]}" --no-progress -o "$OUT/$plan/$plan" 2>&1 | tail -40
      if [ "$plan" = contention ]; then
        python3 -m autoccl.emu.calibrate "$OUT/$plan/$plan.json" --start python/autoccl/data/perfmodel_h200x4.json \
          --hardware "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)x$(nvidia-smi -L | wc -l)" \
          -o "$OUT/$plan/perfmodel.json" 2>&1 | tail -20 || echo "calibration failed (scipy missing?)"
      fi
      (cd "$OUT" && tar czf "$plan.tgz" --exclude='*.logs' "$plan" && rm -rf "$plan")
      continue ;;
    train|train-ceiling)
      # train-ceiling: FSDP2 alone (PARALLEL), each pair once with the default 64-channel communicators and
      # once on NCCL's own (--channel-ceiling 0), alternating
      variants=(default); [ "$plan" = train-ceiling ] && variants=(default ceiling0)
      mkdir -p "$OUT/train"
      for p in $(seq "${TRAIN_PAIRS:-2}"); do
        for v in "${variants[@]}"; do
          left=$((BUDGET_S - (SECONDS - T0)))
          if [ "$left" -lt "${TRAIN_PAIR_S:-240}" ]; then echo "train pair $p $v skipped: ${left} s left"; break 2; fi
          extra=(); [ "$v" = ceiling0 ] && extra=(--channel-ceiling 0)
          modes=${TRAIN_MODES:-nccl,online}
          [ $((p % 2)) = 0 ] && modes=$(tr ',' '\n' <<< "$modes" | tac | paste -sd, -)
          timeout "$left" python3 -m autoccl bench train --preset "${TRAIN_PRESET:-350m}" \
            --parallel "${PARALLEL:-fsdp2,ddp}" --modes "$modes" --step-arms "${TRAIN_STEP_ARMS:-hidden=2,8}" \
            "${extra[@]}" -n "${TRAIN_ITERS:-400}" ${TRAIN_EXTRA:-} \
            --no-progress -o "$OUT/train/pair${p}_$v" 2>&1 | tail -12
        done
      done
      # train-ceiling's variants apart: their online launches ran on other communicators
      for v in "${variants[@]}"; do
        sub=pairs; [ "${#variants[@]}" -gt 1 ] && sub=pairs-$v
        python3 -m autoccl bench train-pairs "$OUT"/train/pair*_"$v".json -o "$OUT/train/$sub" 2>&1 | tail -40 \
          || echo "train-pairs: no summary of the $v pairs"
        for m in online-arms manual; do  # the other tuned modes, each against plain NCCL
          case ",${TRAIN_MODES:-nccl,online}," in *",$m,"*)
            python3 -m autoccl bench train-pairs "$OUT"/train/pair*_"$v".json --mode "$m" -o "$OUT/train/$sub-$m" \
              2>&1 | tail -30 ;; esac
        done
      done
      # the online launches' traces apart (what each task ran, per call): the step can be explained afterwards
      (cd "$OUT" && find train -path '*.logs/online*' -name 'trace.*' | tar czf train-traces.tgz -T - ; \
       tar czf train.tgz --exclude='*.logs' train && rm -rf train)
      continue ;;
    resilience|resilience-kill|resilience-rejoin)
      left=$((BUDGET_S - (SECONDS - T0)))
      if [ "$left" -lt 90 ]; then echo "plan $plan skipped: ${left} s left"; continue; fi
      # the kill run is healthy in ~1 min; a survivor that hangs must not take the rest of the budget
      [ "$plan" != resilience ] && [ "$left" -gt "${RES_KILL_S:-240}" ] && left=${RES_KILL_S:-240}
      RES_STEPS=${RES_STEPS:-200}
      res=(--preset "${TRAIN_PRESET:-350m}" --parallel ddp --modes nccl --data markov --delay sleep
           --no-progress --timeout "$left")
      [ "${RES_AGENT_STREAM:-0}" = 1 ] && res+=(--agent-stream)
      if [ "$plan" = resilience ]; then
        res+=(--resilience both --straggler 1:0.2:2-5 -n "${RES_ITERS:-500}")
      elif [ "$plan" = resilience-kill ]; then
        res+=(--resilience on --kill "1:$((RES_STEPS / 2))" --no-clean-baseline -n "$RES_STEPS")
      else
        res+=(--resilience on --kill "1:$((RES_STEPS / 2))" --rejoin --no-clean-baseline -n $((3 * RES_STEPS)))
      fi
      mkdir -p "$OUT/$plan"
      if [ "${HOSTS_ON_ONE_GPU:-0}" = 1 ]; then
        train_on_two_hosts "$OUT/$plan" "$left" "${res[@]}"
        tail -n 20 "$OUT/$plan/host0.log"; tail -n 5 "$OUT/$plan/host1.log"
      else
        timeout "$left" python3 -m autoccl bench train --nproc 2 "${res[@]}" -o "$OUT/$plan/run" 2>&1 | tail -20
      fi
      # every rank's log of every launch (the killed rank's too) and rank 0's record of every step (written
      # before the end-of-run barrier: a launch that fails there keeps it), beside the summaries
      find "$OUT/$plan" -path '*.logs/*' \( -name 'rank*.log' -o -name result.json \) | while read -r f; do
        cp "$f" "$OUT/$plan/$(basename "$(dirname "$f")").$(basename "$f")"
      done
      (cd "$OUT" && tar czf "$plan.tgz" --exclude='*.logs' "$plan" && rm -rf "$plan")
      continue ;;
    resilience-stream)
      # what the resilient reducer costs on a clean run, with the agent on the training stream (default) and on
      # a stream of its own (--agent-stream), each beside synchronous DDP: RES_STREAM_ROUNDS rounds (default 2),
      # the two variants' order swapped every second round, RES_ITERS steps a launch (default 300)
      mkdir -p "$OUT/$plan"
      for r in $(seq "${RES_STREAM_ROUNDS:-2}"); do
        order=(default stream); [ $((r % 2)) = 0 ] && order=(stream default)
        # under the stream sanitizer (~1.5 s a step) only the agent's own stream is the question
        [ -n "${TORCH_CUDA_SANITIZER:-}" ] && order=(stream)
        for v in "${order[@]}"; do
          left=$((BUDGET_S - (SECONDS - T0)))
          if [ "$left" -lt "${RES_STREAM_S:-110}" ]; then echo "resilience-stream $v $r skipped: ${left} s left"; break 2; fi
          flag=(); [ "$v" = stream ] && flag=(--agent-stream)
          timeout "$left" python3 -m autoccl bench train --nproc 2 --preset "${TRAIN_PRESET:-350m}" --parallel ddp \
            --modes nccl --data markov --no-progress --timeout "$left" --resilience both "${flag[@]}" \
            -n "${RES_ITERS:-300}" -o "$OUT/$plan/round${r}_$v" 2>&1 | tail -8
        done
      done
      (cd "$OUT" && tar czf "$plan.tgz" --exclude='*.logs' "$plan" && rm -rf "$plan")
      continue ;;
    *) echo "unknown plan $plan"; exit 2 ;;
  esac
  left=$((BUDGET_S - (SECONDS - T0)))
  if [ "$left" -lt 30 ]; then echo "plan $plan skipped: ${left} s left"; continue; fi
  echo "== plan $plan (${left} s left)"
  # shellcheck disable=SC2086
  timeout "$left" python3 -m autoccl bench nccl-tests --bin "$NT_BIN" --launch "$LAUNCH" -c "$COLLS" -p "$PASSES" \
    $psizes $piters --timeout 120 --no-progress --mpirun "$MPIRUN" "${RANKS_ARG[@]}" -o "$OUT/$plan" "${args[@]}" \
    2>&1 | tail -40
  # shellcheck disable=SC2086
  [ -f "$OUT/$plan/summary.md" ] || python3 -m autoccl bench nccl-tests --bin "$NT_BIN" -o "$OUT/$plan" \
    --report-only $psizes $piters -p "$PASSES" "${RANKS_ARG[@]}" "${args[@]}" 2>&1 | tail -30
  # each traced mode's cold loop split by what its calls ran (the search's cost where nccl-tests times it): the
  # out-of-place loop is calls w .. w+n-1 of each size (its warm-up first)
  wu=$(sed -n 's/.*-w *\([0-9][0-9]*\).*/\1/p' <<<"$piters"); it=$(sed -n 's/.*-n *\([0-9][0-9]*\).*/\1/p' <<<"$piters")
  window="${wu:-20}-$(( ${wu:-20} + ${it:-40} - 1 ))"
  for traced in "$OUT/$plan"/traces/*/; do
    [ -d "$traced" ] || continue
    mode=$(basename "$traced")
    python3 benchmarks/nccl_tests/cold_pass_cost.py "$traced" --pass 0 --window "$window" > "$OUT/$plan/cold-pass-$mode.md" 2>&1 \
      && tail -1 "$OUT/$plan/cold-pass-$mode.md" | sed "s/^/cold pass, $mode: /"
  done
  (cd "$OUT" && tar czf "$plan.tgz" --exclude="$plan/traces" --exclude="$plan/cache" "$plan" && \
     tar czf "$plan-traces.tgz" "$plan/traces" "$plan/cache" 2>/dev/null; rm -rf "$plan")
done
echo "done at $((SECONDS - T0)) s"
