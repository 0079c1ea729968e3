"""Collective measurements inside one benchmark process (imports torch; run by autoccl.bench.worker)."""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from autoccl.bench.spec import (
    DTYPES,
    REDUCING,
    Load,
    algbw_gbs,
    buffer_elements,
    busbw_gbs,
    cell_key,
    load_from_json,
)


def torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, DTYPES[name][0])  # type: ignore[no-any-return]


class Clock:
    """Times regions of work on one device: CUDA events on GPUs, perf_counter on the CPU (where the
    collectives are synchronous)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.comm_stream = torch.cuda.Stream(device) if self.cuda else None

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def run(self, fn: Callable[[], object], reps: int, on_comm_stream: bool = False) -> Any:
        """Issue `fn` `reps` times; returns a mark to read with `seconds` after `sync`."""
        if not self.cuda:
            t0 = time.perf_counter()
            for _ in range(reps):
                fn()
            return (t0, time.perf_counter())
        stream = self.comm_stream if on_comm_stream else torch.cuda.current_stream(self.device)
        assert stream is not None
        with torch.cuda.stream(stream):
            e0 = torch.cuda.Event(enable_timing=True)
            e1 = torch.cuda.Event(enable_timing=True)
            e0.record(stream)
            for _ in range(reps):
                fn()
            e1.record(stream)
        return (e0, e1)

    @staticmethod
    def seconds(mark: Any) -> float:
        a, b = mark
        if isinstance(a, float):
            return float(b - a)
        return float(a.elapsed_time(b)) / 1e3

    @staticmethod
    def offset(a: Any, b: Any) -> float:
        """Seconds from the start of mark a to the start of mark b."""
        if isinstance(a[0], float):
            return float(b[0] - a[0])
        return float(a[0].elapsed_time(b[0])) / 1e3

    def timed(self, fn: Callable[[], object], reps: int, on_comm_stream: bool = False) -> float:
        mark = self.run(fn, reps, on_comm_stream)
        self.sync()
        return self.seconds(mark)

    def concurrent(
        self, comm: Callable[[], object], iters: int, gemm: Callable[[], object], greps: int
    ) -> tuple[float, float, float]:
        """Run `iters` collectives and `greps` GEMMs at the same time; (comm s, gemm s, makespan s)."""
        if not self.cuda:
            box: dict[str, tuple[float, float]] = {}

            def work() -> None:
                t0 = time.perf_counter()
                for _ in range(greps):
                    gemm()
                box["g"] = (t0, time.perf_counter())

            th = threading.Thread(target=work)
            th.start()
            c = self.run(comm, iters)
            th.join()
            g = box["g"]
            span = max(c[1], g[1]) - min(c[0], g[0])
            return c[1] - c[0], g[1] - g[0], span
        c = self.run(comm, iters, on_comm_stream=True)
        g = self.run(gemm, greps)
        self.sync()
        tc, tg = self.seconds(c), self.seconds(g)
        dg = self.offset(c, g)  # start of the GEMMs relative to the start of the collectives
        span = max(tc, dg + tg) - min(0.0, dg)
        return tc, tg, span


@dataclass
class Ctx:
    rank: int
    world: int
    device: torch.device
    clock: Clock
    meta: Any  # process group for metadata (gloo), so the NCCL trace only holds the measured calls
    seed: int = 1234


def max_across(ctx: Ctx, values: list[float]) -> list[float]:
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=ctx.meta)
    return [float(v) for v in t.tolist()]


def barrier(ctx: Ctx) -> None:
    ctx.clock.sync()
    dist.barrier(group=ctx.meta)


def make_comm(ctx: Ctx, coll: str, nbytes: int, dtype: str) -> Callable[[], object]:
    """The operation of one timing cell, on buffers of zeros (NCCL's speed does not depend on the data;
    zeros keep in-place reductions finite)."""
    n_in, n_out = buffer_elements(coll, nbytes, dtype, ctx.world)
    td = torch_dtype(dtype)
    dev = ctx.device
    if coll == "all_gather":
        inp = torch.zeros(n_in, dtype=td, device=dev)
        out = torch.empty(n_out, dtype=td, device=dev)
        return lambda: dist.all_gather_into_tensor(out, inp)
    if coll == "reduce_scatter":
        inp = torch.zeros(n_in, dtype=td, device=dev)
        out = torch.empty(n_out, dtype=td, device=dev)
        return lambda: dist.reduce_scatter_tensor(out, inp)
    if coll == "all_reduce":
        buf = torch.zeros(n_in, dtype=td, device=dev)
        return lambda: dist.all_reduce(buf)
    if coll == "broadcast":
        buf = torch.zeros(n_in, dtype=td, device=dev)
        return lambda: dist.broadcast(buf, 0)
    if coll == "reduce":
        buf = torch.zeros(n_in, dtype=td, device=dev)
        return lambda: dist.reduce(buf, 0)
    if coll == "all_to_all":
        inp = torch.zeros(n_in, dtype=td, device=dev)
        out = torch.empty(n_out, dtype=td, device=dev)
        return lambda: dist.all_to_all_single(out, inp)
    raise ValueError(coll)


def _gen(ctx: Ctx, who: int, numel: int, dtype: str) -> torch.Tensor:
    """Rank `who`'s check input, reproducible on every rank (same generator on the same device type)."""
    g = torch.Generator(device=ctx.device)
    g.manual_seed(ctx.seed * 1009 + who)
    td = torch_dtype(dtype)
    if td.is_floating_point:
        return torch.randn(numel, generator=g, device=ctx.device, dtype=torch.float32).to(td)
    return torch.randint(-8, 8, (numel,), generator=g, device=ctx.device, dtype=torch.int64).to(td)


def check_cell(ctx: Ctx, coll: str, nbytes: int, dtype: str) -> tuple[bool, float]:
    """Run the collective once on known data and compare with a reference computed locally from every
    rank's regenerated input: exact for data movement, a tolerance for floating-point reductions.
    Returns (ok on every rank, largest error seen)."""
    n, r = ctx.world, ctx.rank
    n_in, n_out = buffer_elements(coll, nbytes, dtype, n)
    td = torch_dtype(dtype)
    mine = _gen(ctx, r, n_in, dtype)
    if coll == "all_gather":
        out = torch.empty(n_out, dtype=td, device=ctx.device)
        dist.all_gather_into_tensor(out, mine)
        ref = torch.cat([_gen(ctx, j, n_in, dtype) for j in range(n)])
    elif coll == "all_to_all":
        out = torch.empty(n_out, dtype=td, device=ctx.device)
        dist.all_to_all_single(out, mine)
        piece = n_in // n
        ref = torch.cat([_gen(ctx, j, n_in, dtype)[r * piece : (r + 1) * piece] for j in range(n)])
    elif coll == "broadcast":
        out = mine.clone()
        dist.broadcast(out, 0)
        ref = _gen(ctx, 0, n_in, dtype)
    else:
        if coll == "reduce_scatter":
            out = torch.empty(n_out, dtype=td, device=ctx.device)
            dist.reduce_scatter_tensor(out, mine)
        else:
            out = mine.clone()
            if coll == "all_reduce":
                dist.all_reduce(out)
            else:
                dist.reduce(out, 0)
        acc = torch.zeros(
            n_in, dtype=torch.float64 if not td.is_floating_point else torch.float32, device=ctx.device
        )
        for j in range(n):
            acc += _gen(ctx, j, n_in, dtype).to(acc.dtype)
        if coll == "reduce_scatter":
            acc = acc[r * n_out : (r + 1) * n_out]
        ref = acc
    ctx.clock.sync()
    if coll == "reduce" and r != 0:
        err, ok = 0.0, True  # only the root's buffer is defined
    elif coll in REDUCING and td.is_floating_point:
        eps = torch.finfo(td).eps
        diff = (out.float() - ref.float()).abs()
        bound = 2 * n * eps * (ref.float().abs() + 1.0)
        err = float(diff.max()) if diff.numel() else 0.0
        ok = bool((diff <= bound).all())
    else:
        same = out.to(ref.dtype) == ref
        ok = bool(same.all())
        err = float((out.double() - ref.double()).abs().max()) if out.numel() else 0.0
    flags = max_across(ctx, [0.0 if ok else 1.0, err])
    return flags[0] == 0.0, flags[1]


def make_gemm(ctx: Ctx, load: Load) -> Callable[[], object]:
    td = torch_dtype(load.dtype)
    g = torch.Generator(device=ctx.device)
    g.manual_seed(ctx.seed + ctx.rank)
    a = torch.randn(load.m, load.k, generator=g, device=ctx.device, dtype=torch.float32).to(td)
    b = torch.randn(load.k, load.n, generator=g, device=ctx.device, dtype=torch.float32).to(td)
    return lambda: torch.sigmoid(a @ b)


def _stats(prefix: str, values: list[float]) -> dict[str, float]:
    s = sorted(values)
    q = statistics.quantiles(s, n=4, method="inclusive") if len(s) > 1 else [s[0]] * 3
    return {
        f"{prefix}": statistics.median(s),
        f"{prefix}_min": s[0],
        f"{prefix}_max": s[-1],
        f"{prefix}_q1": q[0],
        f"{prefix}_q3": q[2],
    }


def measure_cell(
    ctx: Ctx,
    coll: str,
    nbytes: int,
    dtype: str,
    load: Load,
    *,
    warmup: int,
    iters: int,
    reps: int,
    extra_warmup: int = 0,
    record_warmup: bool = False,
    gemm_reps: int | None = None,
    check: bool = False,
) -> tuple[dict[str, Any], list[float] | None]:
    """Measure one (collective, size, load) cell; returns (row, per-iteration warm-up times in us)."""
    comm = make_comm(ctx, coll, nbytes, dtype)
    gemm = make_gemm(ctx, load) if load.active else None
    clock = ctx.clock
    row: dict[str, Any] = {
        "coll": coll,
        "bytes": nbytes,
        "dtype": dtype,
        "world_size": ctx.world,
        "load": load.name,
        "warmup": warmup,
        "iters": iters,
        "reps": reps,
    }
    # GEMM work of a loaded cell: given (fixed by the first launch, so every mode does the same work),
    # else sized to span the collectives of one repetition.
    t_g1 = 0.0
    if gemm is not None:
        for _ in range(2):
            gemm()
        t_g1 = max_across(ctx, [clock.timed(gemm, 3) / 3])[0]
    barrier(ctx)
    for _ in range(warmup):
        comm()
    barrier(ctx)
    trace: list[float] | None = None
    if extra_warmup:
        # The tuning phase (online mode), in the conditions of the measurement: blocks of `iters`
        # back-to-back collectives, beside the same GEMM work per block under load. (Synchronising after
        # every single collective would make each rank's kernel time mostly the wait for the other
        # ranks' host skew, which is what the tuner times; the trace holds each block's mean.)
        block = max(1, iters)
        block_greps = 0
        if gemm is not None:
            block_greps = gemm_reps or max(1, round(clock.timed(comm, block) / max(t_g1, 1e-9)))
        times: list[float] = []
        while len(times) < extra_warmup:
            n = min(block, extra_warmup - len(times))
            if gemm is not None:
                tc = clock.concurrent(comm, n, gemm, max(1, round(block_greps * n / block)))[0]
            else:
                tc = clock.timed(comm, n, on_comm_stream=True)
            times.extend([tc / n * 1e6] * n)
        trace = max_across(ctx, times) if record_warmup else None
        barrier(ctx)
    t_alone: list[float] = []
    g_alone: list[float] = []
    c_load: list[float] = []
    g_load: list[float] = []
    spans: list[float] = []
    serials: list[float] = []
    greps = gemm_reps
    for _ in range(reps):
        barrier(ctx)
        tc = max_across(ctx, [clock.timed(comm, iters, on_comm_stream=True)])[0]
        t_alone.append(tc / iters)
        if gemm is None:
            continue
        if greps is None:
            greps = max(1, round(tc / t_g1))
        barrier(ctx)
        tg = max_across(ctx, [clock.timed(gemm, greps)])[0]
        barrier(ctx)
        tcl, tgl, span = max_across(ctx, list(clock.concurrent(comm, iters, gemm, greps)))
        g_alone.append(tg / greps)
        c_load.append(tcl / iters)
        g_load.append(tgl / greps)
        spans.append(span)
        serials.append(tc + tg)
    st = _stats("time_us", [t * 1e6 for t in t_alone])
    row.update(st)
    row["time_us_all"] = [t * 1e6 for t in t_alone]
    t_med = st["time_us"] / 1e6
    row["algbw_gbs"] = algbw_gbs(nbytes, t_med)
    row["busbw_gbs"] = busbw_gbs(coll, nbytes, t_med, ctx.world)
    row["busbw_gbs_min"] = busbw_gbs(coll, nbytes, st["time_us_max"] / 1e6, ctx.world)
    row["busbw_gbs_max"] = busbw_gbs(coll, nbytes, st["time_us_min"] / 1e6, ctx.world)
    if gemm is not None:
        t_cl = statistics.median(c_load)
        row.update(
            {
                "gemm_reps": greps,
                "gemm_flops": load.flops,
                "gemm_us": statistics.median(g_alone) * 1e6,
                "gemm_load_us": statistics.median(g_load) * 1e6,
                "gemm_slowdown": statistics.median(gl / ga for gl, ga in zip(g_load, g_alone, strict=True)),
                "comm_load_us": t_cl * 1e6,
                "busbw_load_gbs": busbw_gbs(coll, nbytes, t_cl, ctx.world),
                "comm_slowdown": t_cl / t_med if t_med > 0 else math.nan,
                "span_ms": statistics.median(spans) * 1e3,
                "serial_ms": statistics.median(serials) * 1e3,
                "overlap": statistics.median(s / p for s, p in zip(serials, spans, strict=True)),
            }
        )
    if check:
        ok, err = check_cell(ctx, coll, nbytes, dtype)
        row["check"] = "ok" if ok else "FAIL"
        row["check_err"] = err
    return row, trace


def run_coll(ctx: Ctx, spec: dict[str, Any], progress: Callable[[int, int], None]) -> dict[str, Any]:
    """All cells of one launch: loads x collectives x sizes."""
    loads = [load_from_json(d) for d in spec["loads"]]
    colls: list[str] = spec["colls"]
    sizes: list[int] = spec["sizes"]
    gemm_reps: dict[str, int] = spec.get("gemm_reps") or {}
    rows: list[dict[str, Any]] = []
    traces: list[dict[str, Any]] = []
    total = len(loads) * len(colls) * len(sizes)
    done = 0
    for load in loads:
        for coll in colls:
            for nbytes in sizes:
                key = cell_key(coll, nbytes, load.name)
                try:
                    row, trace = measure_cell(
                        ctx,
                        coll,
                        nbytes,
                        spec["dtype"],
                        load,
                        warmup=spec["warmup"],
                        iters=spec["iters"],
                        reps=spec["reps"],
                        extra_warmup=spec.get("online_warmup", 0),
                        record_warmup=spec.get("record_warmup", False),
                        gemm_reps=gemm_reps.get(key),
                        check=spec.get("check", False),
                    )
                except (RuntimeError, NotImplementedError) as e:
                    msg = str(e).splitlines()[0] if str(e) else type(e).__name__
                    if "not supported" not in msg.lower() and "unsupported" not in msg.lower():
                        raise
                    row, trace = (
                        {
                            "coll": coll,
                            "bytes": nbytes,
                            "dtype": spec["dtype"],
                            "world_size": ctx.world,
                            "load": load.name,
                            "skipped": msg,
                        },
                        None,
                    )
                rows.append(row)
                if trace is not None:
                    traces.append({"coll": coll, "bytes": nbytes, "load": load.name, "iter_us": trace})
                done += 1
                progress(done, total)
    return {"rows": rows, "warmup_traces": traces}
