#!/usr/bin/env bash
# The adaptive executor over NCCL on a machine of ONE GPU (the device tool's nvidia-h200): `--hosts-on-one-gpu`
# starts 2 ranks on GPU 0, each a host of its own to NCCL (NCCL_HOSTID, sockets over loopback; docs/adaptive.md,
# "One GPU, two hosts"), so the executor's NCCL path runs where no second GPU is lent. It checks correctness;
# its times say nothing of NVLink (the two ranks share the GPU's SMs and meet over sockets). Steps:
#   1. the machine (machine.txt, with the digest of the sources that ran: benchmarks/gpu/source_digest.sh);
#   2. the synthesizer's extension alone (cmake --target _synth, AUTOCCL_SYNTH_LIB_DIR); the package runs from
#      the tree (PYTHONPATH=python), nothing is pip-installed unless nvidia-ml-py is missing;
#   3. `autoccl topo --device cuda --hosts-on-one-gpu`: the two hosts detected (NVML, nvidia-ml-py), topo.yaml;
#      where detection fails, a 2-node topology file of the same two ranks instead; NCCL's own log of this
#      step and the next (NCCL_DEBUG=INFO, INIT and NET) says whether it saw 2 nodes over NET/Socket;
#   4. `autoccl adaptive check --device cuda --hosts-on-one-gpu -t topo.yaml`: sums (every collective x dtype x
#      ragged size), then `--all-ops` (every reduction), into check.txt;
#   5. `autoccl adaptive bench`, All-Gather / All-Reduce at 64M,256M against NCCL's, for information only
#      (bench.json); its same-result column is a correctness check, its speeds are sockets';
#   6. `autoccl profile` at 1M,16M (profile.json): the profiler's NCCL pattern (the directions in turns) runs;
#      its fits describe sockets.
# Every step gets what is left of DEADLINE_S (default 330 s, under the 6 minutes the call may take), at most
# its own budget, and a step that finds under 20 s left is skipped. Results in $OUT (the device tool brings
# back 8 files at most): machine.txt, run.log, topo.yaml, check.txt, bench.json, profile.json, summary.md.
#   OUT=/tmp/out bash benchmarks/gpu/adaptive_hosts.sh
# DEVICE=cpu runs the same steps on gloo ranks (a dry run of the script where no GPU is; the NCCL lines stay
# empty); BENCH_SIZES replaces the bench's 64M,256M.
# nvidia-ml-py comes from a carried wheel (.whl/nvidia_ml_py-*.whl, as for adaptive.sh) only where the image
# lacks it; check and bench need neither it (given -t) nor scipy (profile's fits; the image has both).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# NVLink multicast stays off in every launch (the adaptive launcher sets the same in its NCCL workers).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$SECONDS
LIMIT=${DEADLINE_S:-330}
STATUS=/tmp/adaptive-hosts-status.txt; : > "$STATUS"
{
  date -u +%FT%TZ; uname -a; nvidia-smi; nvidia-smi topo -m | sed 's/\x1b\[[0-9;]*m//g'  # no terminal colours
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
  echo "source digest: $(bash benchmarks/gpu/source_digest.sh)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown) (the tree sent may be newer: the digest says)"
} > "$OUT/machine.txt" 2>&1

# step NAME BUDGET_S OUTFILE CMD...: run CMD under `timeout` (what is left of the deadline, at most BUDGET_S),
# its output into run.log and, if OUTFILE is not -, appended to OUTFILE; NAME's outcome into $STATUS.
step() {
  local name=$1 budget=$2 file=$3 left rc
  shift 3
  left=$((LIMIT - (SECONDS - T0)))
  [ "$budget" -gt "$left" ] && budget=$left
  if [ "$budget" -lt 20 ]; then
    echo "=== $name: skipped, $left s left of $LIMIT"; echo "$name|skipped ($left s left)" >> "$STATUS"; return 1
  fi
  echo "=== $name ($((SECONDS - T0)) s; up to $budget s)"
  local t=$SECONDS
  if [ "$file" = - ]; then
    timeout -k 10 "$budget" "$@" 2>&1; rc=$?
  else
    echo "\$ ${*}" >> "$file"
    timeout -k 10 "$budget" "$@" 2>&1 | tee -a "$file"; rc=${PIPESTATUS[0]}
  fi
  local what="passed"
  [ "$rc" = 0 ] || what="FAILED (exit $rc)"
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && what="TIMED OUT after $budget s"
  echo "$name|$what in $((SECONDS - t)) s" >> "$STATUS"
  return "$rc"
}

if ! python3 -c "import pynvml" 2>/dev/null; then
  if compgen -G ".whl/nvidia_ml_py-*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps .whl/nvidia_ml_py-*.whl
  else
    echo "nvidia-ml-py is missing and no wheel is carried in .whl/: no detection, the 2-node file instead"
  fi
fi
python3 -c "import click, rich, numpy, yaml" || { echo "click/rich/numpy/yaml missing on this box"; exit 1; }
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH} AUTOCCL_SYNTH_LIB_DIR=/tmp/acsynth/lib
# shellcheck disable=SC2016  # expanded by the inner bash
step build 150 - bash -c 'cmake -S . -B /tmp/acsynth -G Ninja -DCMAKE_BUILD_TYPE=Release -DAUTOCCL_BUILD_TESTS=OFF \
    -DPython3_EXECUTABLE="$(command -v python3)" > /tmp/acsynth.log 2>&1 &&
  cmake --build /tmp/acsynth --target _synth -j "$(nproc)" >> /tmp/acsynth.log 2>&1 &&
  python3 -c "from autoccl.synth import ext; print(\"synthesizer:\", ext().__file__)" ||
  { tail -40 /tmp/acsynth.log; exit 1; }' || { echo "the synthesizer did not build"; exit 1; }

HOSTS=(--device "${DEVICE:-cuda}" --hosts-on-one-gpu)
NCCL_LOG=(env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE=/tmp/nccl-hosts.%h.%p.log)
rm -f /tmp/nccl-hosts.*.log
if ! step topo 60 - "${NCCL_LOG[@]}" python3 -m autoccl topo "${HOSTS[@]}" -o "$OUT/topo.yaml"; then
  echo "detection failed: a 2-node topology file instead (the two hosts through their NICs, nominal)"
  cat > "$OUT/topo.yaml" <<'YAML'
name: two-hosts-on-one-gpu
description: 'fallback: two ranks on GPU 0, each a host of its own to NCCL, over sockets (nominal values)'
npus: [autoccl-host-0/gpu0, autoccl-host-1/gpu0]
links:
  - {src: autoccl-host-0/gpu0, dst: autoccl-host-1/gpu0, latency_us: 20, bandwidth_gbps: 1.25}
  - {src: autoccl-host-1/gpu0, dst: autoccl-host-0/gpu0, latency_us: 20, bandwidth_gbps: 1.25}
YAML
  echo "topology|the 2-node file (detection failed)" >> "$STATUS"
else
  echo "topology|detected (topo.yaml)" >> "$STATUS"
fi
cat "$OUT/topo.yaml"

step "check (sums)" 90 "$OUT/check.txt" "${NCCL_LOG[@]}" \
  python3 -m autoccl adaptive check "${HOSTS[@]}" -t "$OUT/topo.yaml"
step "check --all-ops" 120 "$OUT/check.txt" \
  python3 -m autoccl adaptive check "${HOSTS[@]}" -t "$OUT/topo.yaml" --all-ops
step "bench (information only)" 80 - python3 -m autoccl adaptive bench "${HOSTS[@]}" -t "$OUT/topo.yaml" \
  --colls allgather,allreduce --sizes "${BENCH_SIZES:-64M,256M}" --warmup 2 --iters 5 -o "$OUT/bench.json"
step "profile (information only)" 60 - python3 -m autoccl profile "${HOSTS[@]}" -t "$OUT/topo.yaml" \
  --sizes 1M,16M --repeats 3 -o /tmp/measured.yaml --report "$OUT/profile.json"

echo "=== summary ($((SECONDS - T0)) s)"
cat /tmp/nccl-hosts.*.log > /tmp/nccl-hosts.log 2>/dev/null
python3 - "$OUT" "$STATUS" /tmp/nccl-hosts.log <<'PY' | tee "$OUT/summary.md"
import json, re, sys
from pathlib import Path

out, status, nccl = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
print("# adaptive check and bench, 2 ranks on GPU 0 as two NCCL hosts (benchmarks/gpu/adaptive_hosts.sh)\n")
print((out / "machine.txt").read_text().splitlines()[0] if (out / "machine.txt").exists() else "")
for line in (out / "machine.txt").read_text().splitlines():
    if line.startswith(("torch ", "source digest", "commit")) or "NVIDIA H" in line and "|" in line:
        print(f"- {line.strip()}")
print("\n| step | outcome |\n|---|---|")
for line in status.read_text().splitlines():
    name, _, what = line.partition("|")
    print(f"| {name} | {what} |")
log = nccl.read_text(errors="replace") if nccl.exists() else ""
nodes = sorted(set(re.findall(r"nRanks (\d+) nNodes (\d+)", log)))
nets = sorted(set(re.findall(r"Using network (\S+)", log)))
via = sorted(set(re.findall(r"via (NET/\S+|P2P/\S+|SHM/\S+)", log)))
print(f"\nNCCL (topo and sums check, NCCL_DEBUG=INFO): communicators (ranks, nodes) {nodes or 'not logged'}; "
      f"network {nets or 'not logged'}; transports {via or 'not logged'}\n")
if (out / "check.txt").exists():
    print("Correctness (`check.txt`):\n")
    for line in (out / "check.txt").read_text().splitlines():
        if line.startswith("$ ") or "cases on rank 0" in line or line.startswith(("Error", "  ")):
            print(f"    {line}")
if (out / "bench.json").exists():
    rows = json.loads((out / "bench.json").read_text())["rows"]
    print("\nBench, for information only (sockets over loopback on one shared GPU: nothing of NVLink):\n\n"
          "| collective | bytes | plan busbw GB/s | NCCL busbw GB/s | plan/NCCL | same result as NCCL | "
          "back to back plan/NCCL |\n|---|---|---|---|---|---|---|")
    for r in rows:
        nat = r["native_busbw_gbps"]
        print(f"| {r['collective']} | {r['bytes']} | {r['plan_busbw_gbps']:.2f} | "
              f"{'n/a' if nat is None else f'{nat:.2f}'} | {r['ratio'] or 0:.3f} | {r['same_as_native']} | "
              f"{r['loop_ratio'] or 0:.3f} |")
if (out / "profile.json").exists():
    prof = json.loads((out / "profile.json").read_text())["profile"]
    print("\nProfile, for information only (the directions taken in turns; sockets):\n")
    for p in prof["pairs"]:
        print(f"- {p['src']} -> {p['dst']}: alpha {p['latency_us']:.1f} us, beta {p['bandwidth_gbps']:.3f} GB/s")
PY
echo "done in $((SECONDS - T0)) s"
grep -q "FAILED\|TIMED OUT\|^check.*skipped" "$STATUS" && exit 1  # a check not run is no pass
exit 0
