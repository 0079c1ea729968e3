#!/usr/bin/env bash
# The adaptive collectives on a GPU machine of the device tool (written for nvidia-h100-x2; any one host with
# 2+ GPUs; its 2 x H200 run is in benchmarks/results/h200x2/adaptive/). What it measures, against the
# targets of docs/adaptive.md ("GPU targets"):
#   1. `autoccl topo --device cuda`: the detected NVLink/NVSwitch topology (expect NV18 to an NVSwitch on H100 SXM);
#   2. plain CUDA peer copies (tensor.copy_ between GPUs: cudaMemcpyPeerAsync) at 256 MiB, both directions;
#   3. `autoccl profile --device cuda`: every link's alpha/beta over NCCL send/recv; target: the NV18 link's
#      beta within 10 % of (2);
#   4. `autoccl adaptive bench --device cuda`: plans executed over NCCL point-to-point against NCCL's own
#      All-Gather / All-Reduce at 64 MiB .. 1 GiB; target: plan busbw >= 80 % of NCCL's at >= 64 MiB;
#   5. `autoccl adaptive check --device cuda`: every collective x dtype from plans against the reference;
#   and, between 2 and 3, benchmarks/gpu/probes/adaptive_breakdown.py: each plan's GPU kernels, busy span and host
#      time per call beside NCCL's collective (torch.profiler), to tell host-bound from NCCL point-to-point-bound.
# Results go to $OUT (summary.md plus the JSON/YAML files each step writes).
#   OUT=/tmp/out bash benchmarks/gpu/adaptive.sh
# The box has no internet: nvidia-ml-py and scipy come from carried wheels (.whl/nvidia_ml_py-*.whl and
# .whl/scipy-*-cp312-*manylinux*x86_64.whl for the image's Python 3.12, git-ignored: name `.whl` in the device tool's
# carry; `pip download --only-binary=:all: --platform manylinux_2_28_x86_64 --python-version 3.12 -d .whl scipy
# nvidia-ml-py` here; leave MPICH's wheel out of that call's .whl, the carry holds 64 MiB) unless installed. Self-contained: benchmarks/gpu/setup.sh (MPICH, nccl-tests,
# the plugin) is not needed here.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# NVLink multicast stays off in every launch (the adaptive launcher sets the same in its NCCL workers).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
exec > >(tee -a "$OUT/run.log") 2>&1
T0=$SECONDS
{
  date -u +%FT%TZ; uname -a; nvidia-smi; nvidia-smi topo -m | sed 's/\x1b\[[0-9;]*m//g'  # no terminal colours
  python3 -c 'import torch, sys; print("python", sys.version.split()[0]); print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())), "gpus", torch.cuda.device_count())'
} > "$OUT/machine.txt" 2>&1
python3 -c "import pynvml" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .whl/nvidia_ml_py-*.whl \
  || { echo "nvidia-ml-py is missing and no wheel is carried in .whl/"; exit 1; }
# The package with its synthesis extension (benchmarks/gpu/setup.sh builds only the plugin): the image's
# scikit-build-core, pybind11, cmake and ninja, no downloads.
python3 -m pip install --no-build-isolation --no-deps . > "$OUT/pip-install.log" 2>&1 \
  || { tail -40 "$OUT/pip-install.log"; exit 1; }
python3 -c "import scipy" 2>/dev/null || python3 -m pip install -q --no-index --no-deps .whl/scipy-*.whl \
  || { echo "scipy is missing and no wheel is carried in .whl/"; exit 1; }
python3 -c "import click, rich, numpy, yaml, scipy" || { echo "click/rich/numpy/yaml/scipy missing on this box"; exit 1; }
NGPU=$(python3 -c "import torch; print(torch.cuda.device_count())")
step() { echo "=== $1 ($((SECONDS - T0)) s)"; }

step "topo"
python3 -m autoccl topo --device cuda -o "$OUT/topo.yaml" --plot "$OUT/topo.png" --reports "$OUT/reports.json" \
  2>&1 | tee "$OUT/topo.txt"

step "copy bandwidth + plans against NCCL"
python3 -m autoccl adaptive bench --device cuda -t "$OUT/topo.yaml" --colls allgather,allreduce \
  --sizes "${SIZES:-64M,256M,1G}" --copy 256M --warmup 5 --iters 20 -o "$OUT/bench.json" 2>&1 | tee "$OUT/bench.txt"

step "where a plan's time goes (torch.profiler, back to back, plan beside NCCL's collective)"
timeout 120 python3 -m torch.distributed.run --nproc-per-node "$NGPU" benchmarks/gpu/probes/adaptive_breakdown.py \
  "$OUT/topo.yaml" "$OUT" "${BREAKDOWN_SIZES:-64M,256M}" > "$OUT/breakdown.md" 2> "$OUT/breakdown.err" \
  || { echo "breakdown failed:"; tail -20 "$OUT/breakdown.err"; }
cat "$OUT/breakdown.md"

step "profile"
python3 -m autoccl profile --device cuda -t "$OUT/topo.yaml" -o "$OUT/measured.yaml" --report "$OUT/profile.json" \
  --sizes "${PROFILE_SIZES:-1M,16M,64M,256M}" --repeats 5 --validate 256M 2>&1 | tee "$OUT/profile.txt"

step "plans from the measured topology against NCCL"
python3 -m autoccl adaptive bench --device cuda -t "$OUT/measured.yaml" --colls allgather,allreduce \
  --sizes "${SIZES:-64M,256M,1G}" --warmup 5 --iters 20 -o "$OUT/bench-measured.json" 2>&1 | tee "$OUT/bench-measured.txt"

step "correctness"
python3 -m autoccl adaptive check --device cuda -t "$OUT/measured.yaml" 2>&1 | tail -5 | tee "$OUT/check.txt"

step "summary"
python3 - "$OUT" <<'PY' | tee "$OUT/summary.md"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
bench = json.loads((out / "bench.json").read_text())
prof = json.loads((out / "profile.json").read_text())["profile"]
print("| link | copy GB/s | profiled beta GB/s | beta / copy | target (within 10 %) |\n|---|---|---|---|---|")
for c in bench.get("copy", []):
    p = next((x for x in prof["pairs"] if x["src"] == c["src"] and x["dst"] == c["dst"]), None)
    if p:
        r = p["bandwidth_gbps"] / c["gbps"]
        err = "(no fit: a lower bound)" if p["bandwidth_err_gbps"] is None else f"+- {p['bandwidth_err_gbps']:.1f}"
        print(f"| {c['src']}->{c['dst']} | {c['gbps']:.1f} | {p['bandwidth_gbps']:.1f} {err}"
              f" | {r:.3f} | {'met' if abs(r - 1) <= 0.10 else 'NOT met'} |")
for name in ("bench.json", "bench-measured.json"):
    rows = json.loads((out / name).read_text())["rows"]
    print(f"\n{name}: one call at a time (barrier, then the call to its end), and back to back as nccl-tests "
          "times (host issue overlapped)\n\n| collective | bytes | plan busbw | NCCL busbw | plan/NCCL | target (>= 0.80) "
          "| same result | plan us (issuing) | back to back: plan busbw | NCCL busbw | plan/NCCL | target |\n"
          "|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        if r["ratio"] is None:
            print(f"| {r['collective']} | {r['bytes']} | {r['plan_busbw_gbps']:.1f} | n/a | n/a | not measured | n/a "
                  f"| {r['plan_us']:.0f} ({r.get('plan_host_us', 0):.0f}) | {r['plan_loop_busbw_gbps']:.1f} | n/a | n/a "
                  "| not measured |")
            continue
        verdict = lambda x: "met" if x >= 0.8 else "NOT met"
        print(f"| {r['collective']} | {r['bytes']} | {r['plan_busbw_gbps']:.1f} | {r['native_busbw_gbps']:.1f} "
              f"| {r['ratio']:.3f} | {verdict(r['ratio'])} | {r['same_as_native']} "
              f"| {r['plan_us']:.0f} ({r.get('plan_host_us', 0):.0f}) | {r['plan_loop_busbw_gbps']:.1f} "
              f"| {r['native_loop_busbw_gbps']:.1f} | {r['loop_ratio']:.3f} | {verdict(r['loop_ratio'])} |")
PY
echo "done in $((SECONDS - T0)) s; GPUs: $NGPU"
