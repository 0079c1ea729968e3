"""Where an executed plan's time goes on the GPU, beside NCCL's own collective (one rank a GPU, torchrun).

For each collective and size, a plan synthesized for the topology file given, run back to back under
torch.profiler, then NCCL's own collective the same way. Per rank: each GPU kernel and copy (name, count,
total µs), the GPU's busy span from the first to the last of them, and the host's time per call. A plan
whose span is much shorter than its time per call waits on its host; one whose NCCL send/receive kernel
alone outlasts NCCL's collective kernel loses inside NCCL's point-to-point path.

    torchrun --nproc-per-node 2 benchmarks/gpu/probes/adaptive_breakdown.py TOPO.yaml OUT_DIR [SIZES]

Writes OUT_DIR/breakdown.json and prints a markdown table (rank 0).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import yaml
from torch.profiler import ProfilerActivity, profile

from autoccl import synth
from autoccl.adaptive.jobs import _buffers, _run_native, _run_plan, init_from_launcher
from autoccl.adaptive.plan import Plan
from autoccl.synth import parse_size

CALLS = 5


def _device_us(evt: Any) -> float:
    for name in ("device_time_total", "cuda_time_total", "self_device_time_total"):
        v = getattr(evt, name, None)
        if v:
            return float(v)
    return 0.0


def _breakdown(fn: Any) -> dict[str, Any]:
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        host_us = (time.perf_counter() - t0) * 1e6 / CALLS
        torch.cuda.synchronize()
        wall_us = (time.perf_counter() - t0) * 1e6 / CALLS
    kernels = []
    for evt in prof.key_averages():
        us = _device_us(evt)
        # "nccl:..." are PyTorch's ranges around a collective (their device time is their kernels')
        on_gpu = str(getattr(evt, "device_type", "")).endswith("CUDA")
        if us > 0 and on_gpu and not evt.key.startswith("nccl:"):
            kernels.append({"name": evt.key[:90], "count": evt.count, "total_us": round(us, 1)})
    kernels.sort(key=lambda k: -k["total_us"])
    gpu = [e for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA")]
    span = 0.0
    if gpu:
        start = min(e.time_range.start for e in gpu)
        end = max(e.time_range.end for e in gpu)
        span = (end - start) / CALLS
    return {
        "host_us_per_call": round(host_us, 1),
        "wall_us_per_call": round(wall_us, 1),
        "gpu_span_us_per_call": round(span, 1),
        "kernels": kernels[:8],
    }


def main() -> None:
    topo_path, out_dir = sys.argv[1], Path(sys.argv[2])
    sizes = [int(parse_size(s)) for s in (sys.argv[3] if len(sys.argv) > 3 else "64M,256M").split(",")]
    init_from_launcher("cuda")
    rank, world = dist.get_rank(), dist.get_world_size()
    x = torch.zeros(1, device="cuda")
    dist.all_reduce(x)
    topo = synth.topology_from_dict(yaml.safe_load(Path(topo_path).read_text()))
    results = []
    for coll in ("allgather", "allreduce"):
        for nbytes in sizes:
            sched, _ = synth.synthesize(topo, coll, float(nbytes), chunks=1, seeds=1)
            plan = Plan.from_schedule(sched, topo)
            a, b = _buffers(coll, nbytes, "cuda", world)
            row = {
                "collective": coll,
                "bytes": nbytes,
                "plan": _breakdown(lambda p=plan, x=a, y=b: _run_plan(p, x, y)),
                "nccl": _breakdown(lambda c=coll, x=a, y=b: _run_native(c, x, y)),
            }
            everyone: list[Any] = [None] * world
            dist.all_gather_object(everyone, row)
            results.append(everyone)
    if rank == 0:
        out_dir.mkdir(parents=True, exist_ok=True)
        (out_dir / "breakdown.json").write_text(json.dumps(results, indent=1) + "\n")
        print(
            "| collective | bytes | rank | side | µs a call (host issue) | GPU busy span µs "
            "| kernels: name ×count total µs |"
        )
        print("|---|---|---|---|---|---|---|")
        for per_rank in results:
            for r, row in enumerate(per_rank):
                for side in ("plan", "nccl"):
                    d = row[side]
                    ks = "; ".join(
                        f"{k['name'][:48]} ×{k['count']} {k['total_us']:.0f}" for k in d["kernels"][:4]
                    )
                    print(
                        f"| {row['collective']} | {row['bytes']} | {r} | {side} "
                        f"| {d['wall_us_per_call']:.0f} ({d['host_us_per_call']:.0f}) "
                        f"| {d['gpu_span_us_per_call']:.0f} | {ks} |"
                    )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
