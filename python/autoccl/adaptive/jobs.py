"""What each rank runs for the `autoccl topo`, `autoccl profile` and `autoccl adaptive` commands, either in
processes started by autoccl.adaptive.launch (--nproc) or in the processes of a launcher (torchrun, srun)."""

from __future__ import annotations

import os
import statistics
import time
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from autoccl.adaptive import collectives as C
from autoccl.adaptive.detect import build_topology, gather_reports
from autoccl.adaptive.plan import Plan
from autoccl.adaptive.profile import measured_topology, run_profile
from autoccl.adaptive.transport import TorchTransport
from autoccl.tuner_env import SAFETY_ENV

BUS_FACTOR = {
    "allgather": lambda n: (n - 1) / n,
    "reducescatter": lambda n: (n - 1) / n,
    "allreduce": lambda n: 2 * (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
}


def init_from_launcher(device: str, timeout_s: float = 600) -> None:
    backend = "nccl" if device == "cuda" else "gloo"
    if device == "cuda":
        os.environ.update(SAFETY_ENV)  # NVLink multicast off in every launch, as the benchmark harness does
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend, timeout=timedelta(seconds=timeout_s))


def _device_setup(device: str) -> None:
    if device == "cuda":
        # the NCCL communicator is created by the first collective; p2p batches need every rank there
        x = torch.zeros(1, device="cuda")
        dist.all_reduce(x)
        torch.cuda.synchronize()


def topo_job(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    _device_setup(cfg["device"])
    reports = gather_reports(cfg["device"])
    return {
        "topology": build_topology(reports, cfg.get("name", "")),
        "reports": [r.to_dict() for r in reports],
    }


def profile_job(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    device = cfg["device"]
    _device_setup(device)
    structure = cfg.get("structure")
    if structure is None:
        structure = build_topology(gather_reports(device), cfg.get("name", ""))
    hosts = [n.rsplit("/", 1)[0] for n in structure["npus"]]
    t = TorchTransport()
    t0 = time.perf_counter()
    prof = run_profile(
        t,
        device,
        cfg["sizes"],
        repeats=cfg["repeats"],
        concurrent=cfg["concurrent"],
        hosts=hosts if len(set(hosts)) > 1 else None,
    )
    doc, model = measured_topology(structure, prof, cfg["model"])
    out: dict[str, Any] = {
        "topology": doc,
        "model": model,
        "profile": prof.to_dict(),
        "seconds": time.perf_counter() - t0,
    }
    if cfg.get("validate"):
        out["validation"] = validate(doc, cfg["validate"], device, cfg.get("chunks", 1))
    return out


def validate(doc: dict[str, Any], nbytes: int, device: str, chunks: int) -> list[dict[str, Any]]:
    """The synthesizer's prediction against the executed time, for All-Gather and All-Reduce of nbytes
    on the measured topology."""
    from autoccl import synth

    topo = synth.topology_from_dict(doc)
    n = dist.get_world_size()
    rows = []
    for coll in ("allgather", "allreduce"):
        sched, _ = synth.synthesize(topo, coll, float(nbytes), chunks=chunks, seeds=4)
        plan = Plan.from_schedule(sched, topo)
        times = _time_plan(plan, nbytes, device, n, warmup=2, iters=5)
        rows.append(
            {
                "collective": coll,
                "bytes": nbytes,
                "predicted_us": plan.time_us,
                "measured_us": times,
                "error": times / plan.time_us - 1 if plan.time_us else None,
            }
        )
    return rows


def _buffers(coll: str, nbytes: int, device: str, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    elems = max(nbytes // 4, n)
    elems -= elems % n
    if coll == "allgather":
        return torch.empty(elems, device=device), torch.ones(elems // n, device=device)
    if coll == "reducescatter":
        return torch.empty(elems // n, device=device), torch.ones(elems, device=device)
    return torch.ones(elems, device=device), torch.empty(0, device=device)


def _run_plan(plan: Plan, a: torch.Tensor, b: torch.Tensor) -> None:
    if plan.collective == "allgather":
        C.all_gather_into_tensor(a, b, plan)
    elif plan.collective == "reducescatter":
        C.reduce_scatter_tensor(a, b, plan)
    elif plan.collective == "allreduce":
        C.all_reduce(a, plan)
    elif plan.collective == "broadcast":
        C.broadcast(a, plan)
    else:
        C.reduce(a, plan)


def _run_native(coll: str, a: torch.Tensor, b: torch.Tensor) -> None:
    if coll == "allgather":
        C.native_all_gather(a, b)
    elif coll == "reducescatter":
        C.native_reduce_scatter(a, b)
    elif coll == "allreduce":
        dist.all_reduce(a)
    elif coll == "broadcast":
        dist.broadcast(a, 0)
    else:
        dist.reduce(a, 0)


def _timed(fn: Any, device: str, warmup: int, iters: int) -> float:
    """Median time of fn() in us, every rank starting together; the slowest rank's median."""
    return _timed_with_host(fn, device, warmup, iters)[0]


def _timed_with_host(fn: Any, device: str, warmup: int, iters: int) -> tuple[float, float]:
    """(median time of fn() in us, median host time until fn() returned in us), every rank starting together;
    the slowest rank's medians. On a GPU the host time is what issuing the work costs: where it comes near the
    whole, the host, not the transfers, sets the pace."""
    for _ in range(warmup):
        fn()
    vals, host = [], []
    for _ in range(iters):
        dist.barrier()
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t0) * 1e6)
        if device == "cuda":
            torch.cuda.synchronize()
        vals.append((time.perf_counter() - t0) * 1e6)
    med = torch.tensor([statistics.median(vals), statistics.median(host)], dtype=torch.float64, device=device)
    dist.all_reduce(med, op=dist.ReduceOp.MAX)
    return float(med[0].item()), float(med[1].item())


def _timed_loop(fn: Any, device: str, iters: int) -> float:
    """Mean time of fn() in us over `iters` calls issued back to back after one common start, as nccl-tests
    times a collective: the host issues the next call while the GPU still runs the last, so what issuing
    costs is hidden behind the transfers where they take longer. The slowest rank's mean."""
    dist.barrier()
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    if device == "cuda":
        torch.cuda.synchronize()
    mean = torch.tensor([(time.perf_counter() - t0) * 1e6 / iters], dtype=torch.float64, device=device)
    dist.all_reduce(mean, op=dist.ReduceOp.MAX)
    return float(mean[0].item())


def _time_plan(plan: Plan, nbytes: int, device: str, n: int, warmup: int, iters: int) -> float:
    a, b = _buffers(plan.collective, nbytes, device, n)
    return _timed(lambda: _run_plan(plan, a, b), device, warmup, iters)


def copy_bandwidth(nbytes: int, iters: int = 20) -> list[dict[str, Any]]:
    """Plain CUDA peer copies (cudaMemcpyPeerAsync through tensor.copy_) between every ordered pair of
    visible GPUs: the reference the profiled link bandwidth is held against."""
    rows = []
    ndev = torch.cuda.device_count()
    for s in range(ndev):
        for d in range(ndev):
            if s == d:
                continue
            src = torch.ones(nbytes, dtype=torch.uint8, device=f"cuda:{s}")
            dst = torch.empty(nbytes, dtype=torch.uint8, device=f"cuda:{d}")
            for _ in range(3):
                dst.copy_(src)
            torch.cuda.synchronize(s)
            torch.cuda.synchronize(d)
            with torch.cuda.device(s):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(iters):
                    dst.copy_(src)
                end.record()
                end.synchronize()
            ms = start.elapsed_time(end) / iters
            rows.append({"src": s, "dst": d, "bytes": nbytes, "us": ms * 1e3, "gbps": nbytes / (ms * 1e6)})
    return rows


def _job_topology(cfg: dict[str, Any], device: str) -> tuple[dict[str, Any], Any]:
    """The job's topology: the document the command gave (cfg["topology"]), or, where it gave none, the one
    this job's ranks detect together (every rank takes part); and that document built (autoccl.synth)."""
    from autoccl import synth

    doc = cfg.get("topology")
    if doc is None:
        doc = build_topology(gather_reports(device))
    return doc, synth.topology_from_dict(doc)


def bench_job(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """Plans against the backend's own collectives: busbw per collective and size, plus correctness of
    each plan's result against the backend's (bit-identical gathers)."""
    from autoccl import synth

    device = cfg["device"]
    _device_setup(device)
    doc, topo = _job_topology(cfg, device)
    n = world
    out: dict[str, Any] = {"rows": [], "topology": doc}
    if cfg.get("copy") and device == "cuda" and torch.cuda.device_count() > 1:
        # The other ranks wait on the job's store, not in an NCCL barrier: a barrier's kernel would spin on
        # their GPUs during the copies, and another process's kernel takes time slices from the copies'
        # (2 x H200: 117 GB/s into the GPU whose rank sat in the barrier, 386 GB/s the other way).
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            out["copy"] = copy_bandwidth(cfg["copy"])
            store.set("autoccl/copy-done", "1")
        else:
            store.wait(["autoccl/copy-done"])
    dist.barrier()
    for coll in cfg["colls"]:
        for nbytes in cfg["sizes"]:
            sched, _ = synth.synthesize(topo, coll, float(nbytes), chunks=cfg["chunks"], seeds=cfg["seeds"])
            plan = Plan.from_schedule(sched, topo)
            a, b = _buffers(coll, nbytes, device, n)
            real_bytes = a.numel() * 4 if coll != "reducescatter" else b.numel() * 4
            plan_us, plan_host_us = _timed_with_host(
                lambda p=plan, x=a, y=b: _run_plan(p, x, y), device, cfg["warmup"], cfg["iters"]
            )
            plan_loop_us = _timed_loop(lambda p=plan, x=a, y=b: _run_plan(p, x, y), device, cfg["iters"])
            native_us: float | None
            native_loop_us: float | None
            try:
                native_us = _timed(
                    lambda c=coll, x=a, y=b: _run_native(c, x, y), device, cfg["warmup"], cfg["iters"]
                )
                native_loop_us = _timed_loop(
                    lambda c=coll, x=a, y=b: _run_native(c, x, y), device, cfg["iters"]
                )
                ok: bool | None = _same_as_native(coll, plan, nbytes, device, n, rank)
            except (RuntimeError, ValueError):  # the backend lacks this collective (gloo: reduce_scatter)
                native_us, native_loop_us, ok = None, None, None
            f = BUS_FACTOR[coll](n)
            out["rows"].append(
                {
                    "collective": coll,
                    "bytes": real_bytes,
                    "plan_us": plan_us,
                    "plan_host_us": plan_host_us,  # issuing the plan (GPU: before the transfers end)
                    "native_us": native_us,
                    "plan_busbw_gbps": real_bytes / plan_us / 1e3 * f,
                    "native_busbw_gbps": real_bytes / native_us / 1e3 * f if native_us else None,
                    "ratio": native_us / plan_us if native_us else None,
                    # back to back, as nccl-tests times a collective (the rows above: one call at a time)
                    "plan_loop_us": plan_loop_us,
                    "native_loop_us": native_loop_us,
                    "plan_loop_busbw_gbps": real_bytes / plan_loop_us / 1e3 * f,
                    "native_loop_busbw_gbps": (
                        real_bytes / native_loop_us / 1e3 * f if native_loop_us else None
                    ),
                    "loop_ratio": native_loop_us / plan_loop_us if native_loop_us else None,
                    "predicted_us": plan.time_us,
                    "same_as_native": ok,
                }
            )
    return out


def _same_as_native(coll: str, plan: Plan, nbytes: int, device: str, n: int, rank: int) -> bool:
    g = torch.Generator(device="cpu").manual_seed(rank + 1)
    a, b = _buffers(coll, min(nbytes, 1 << 24), device, n)
    src = b if coll in ("allgather", "reducescatter") else a
    src.copy_(torch.randn(src.numel(), generator=g).to(device))
    a2, b2 = a.clone(), b.clone()
    _run_plan(plan, a, b)
    _run_native(coll, a2, b2)
    if coll in ("allgather", "broadcast"):
        ok = bool(torch.equal(a.view(torch.uint8), a2.view(torch.uint8)))
    elif coll == "reduce" and rank != plan.root:
        ok = True
    else:
        ok = bool(torch.allclose(a, a2, rtol=1e-5, atol=1e-5))
    flag = torch.tensor([0 if ok else 1], device=device)
    dist.all_reduce(flag)
    return int(flag.item()) == 0


def generated_doc(spec: str) -> dict[str, Any]:
    """A generator spec (e.g. torus:2x4) as a topology document."""
    from autoccl.synth import parse_gen_spec

    return topology_doc(parse_gen_spec(spec))


def topology_doc(t: Any) -> dict[str, Any]:
    """A built topology (autoccl.synth) as a document of its nodes and links: what every rank builds."""
    doc: dict[str, Any] = {
        "name": t.name,
        "nodes": [{"name": n, "kind": k} for n, k in t.nodes],
        "links": [{"src": s, "dst": d, "latency_us": lat, "bandwidth_gbps": bw} for s, d, lat, bw in t.links],
    }
    if list(t.dims):
        doc["dims"] = list(t.dims)
    return doc


def check_job(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    """The correctness matrix (autoccl.adaptive.verify) on this machine."""
    from autoccl import synth
    from autoccl.adaptive.verify import dtype_by_name, run_matrix

    device = cfg["device"]
    _device_setup(device)
    topo = _job_topology(cfg, device)[1]
    plans = {
        c: Plan.from_schedule(
            synth.synthesize(topo, c, float(cfg["bytes"]), chunks=cfg["chunks"], seeds=2)[0], topo
        )
        for c in cfg["colls"]
    }
    dtypes = [dtype_by_name(d) for d in cfg["dtypes"]] if cfg.get("dtypes") else None
    kw: dict[str, Any] = {
        "sizes": cfg["sizes"],
        "device": device,
        "ops": cfg.get("ops"),
        "both_kinds": cfg.get("both_kinds", False),
        "cycle_sizes": cfg.get("cycle_sizes", False),
    }
    if dtypes is not None:
        kw["dtypes"] = dtypes
    rep = run_matrix(plans, rank, world, **kw)
    return {"cases": rep.cases, "failures": rep.failures}
