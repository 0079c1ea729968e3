"""One rank's GPU timeline from an emulator run, as the Chrome trace torch.profiler writes (the events
autoccl.bench.exposure_truth reads), so that the profiler's exposure truth can be checked against scenarios
whose exposure is declared (docs/emulator.md, "Computation and training steps").

Input: a run made with `compute_spans=True` (`RunResult.calls`, `.compute`, `.steps`). Output, per global
rank:

- one NCCL kernel per batch (the calls NCCL aggregates into one launch), `cat` `kernel` on its communicator's
  stream, named as NCCL 2.19+ names its kernels (`ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)`), with
  PyTorch's collective metadata in its args (`Collective name`, `In msg nelems`, `Out msg nelems`, `dtype`)
  sized so that exposure_truth's bytes are the plugin's (`task_bytes`: the tuner's nBytes);
- one computation kernel per group's computation span, on one compute stream (the emulator's rank has one);
- `ProfilerStep#N` spans as `gpu_user_annotation` (there are no CPU launch events: exposure_truth then puts a
  kernel into the step whose GPU span holds its start). Step N runs from step N-1's end (the end of its
  `step=1` group's last kernel) to its own; the first from the rank's first event.

A rank of one communicator only (chrome_trace says why).

Times: `ts`/`dur` in µs from the rank's first event (the emulator's ns clock starts near 1.7e18: as µs in a
double it would keep only a quarter µs), on a grid of 1/1024 µs (about a ns), where a double holds them and
their sums exactly: a computation that starts where a kernel ends (wait=prev/self) starts at exactly the
kernel's `ts + dur`, so exposure_truth sees it not yet running at that end, as the emulator ordered them (µs
with ns decimals are not exact in binary: `ts + dur` could land an ulp past the computation's start)."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping
from typing import Any

from autoccl.emu.scenario import DTYPE_BYTES, PER_RANK_COLLS

Record = Mapping[str, Any]

# NCCL's function names in its kernels' names
KERNEL_FUNC = {
    "allreduce": "AllReduce",
    "allgather": "AllGather",
    "reducescatter": "ReduceScatter",
    "broadcast": "Broadcast",
    "reduce": "Reduce",
}
REDUCING = ("allreduce", "reducescatter", "reduce")  # their kernels' names carry the op and the type
# what record_param_comms writes as `Collective name` for c10d's ops
COMMS_NAME = {
    "allreduce": "allreduce",
    "allgather": "_allgather_base",
    "reducescatter": "_reduce_scatter_base",
    "broadcast": "broadcast",
    "reduce": "reduce",
}
C10_DTYPE = {"f32": "Float", "bf16": "BFloat16", "f16": "Half", "i8": "Char"}  # c10::toString(ScalarType)
COMPUTE_STREAM = 7
NCCL_STREAM = 20  # the communicator's


def step_ends(calls: Iterable[Record], steps: Iterable[Record], grank: int) -> list[int]:
    """The ends of `grank`'s training steps on the calls' clock: a step record's end_ns is on the rank's
    clock, counted from its first kernel; the same instant is the last stop_ns of its group's calls."""
    stop: dict[tuple[str, int, int], int] = {}
    for c in calls:
        if int(c["grank"]) == grank:
            key = (str(c["comm"]), int(c["group"]), int(c["rep"]))
            stop[key] = max(stop.get(key, 0), int(c["stop_ns"]))
    ends = []
    for s in steps:
        if int(s["grank"]) == grank:
            key = (str(s["comm"]), int(s["group"]), int(s["rep"]))
            if key not in stop:
                raise ValueError(f"step record {dict(s)} has no call of its group")
            ends.append(stop[key])
    return sorted(ends)


def _elems(coll: str, nbytes: int, nranks: int, elem: int) -> tuple[int, int]:
    """(In msg nelems, Out msg nelems) of a call whose tuner bytes are `nbytes`: all-gather's input and
    reduce-scatter's output are one rank's share (what exposure_truth.tuner_bytes reverses)."""
    full = nbytes // elem
    if coll in PER_RANK_COLLS:
        share = full // nranks
        return (share, full) if coll == "allgather" else (full, share)
    return full, full


def chrome_trace(
    calls: Iterable[Record],
    compute: Iterable[Record],
    steps: Iterable[Record],
    grank: int = 0,
    *,
    last_steps: int | None = None,
    dtype: str = "f32",
) -> dict[str, Any]:
    """Global rank `grank`'s GPU timeline as a Chrome trace dict (module doc). `last_steps`: only the last
    N steps' spans, and the kernels that overlap them (a profile of a few steps after the search). `dtype`:
    the scenario groups' (the call records do not carry it; only bytes = nelems x its size matter)."""
    calls = [c for c in calls if int(c["grank"]) == grank]
    spans = [s for s in compute if int(s["grank"]) == grank]
    if not calls:
        raise ValueError(f"no call of global rank {grank}")
    # Each communicator's records are on its own stream clock, offset from the others' by a constant the
    # records do not carry (emulator.cc: CommState::baseNs): put side by side they would be out of step.
    comms = sorted({str(c["comm"]) for c in calls} | {str(s["comm"]) for s in spans})
    if len(comms) > 1:
        raise ValueError(f"global rank {grank} plays communicators {', '.join(comms)}: one at a time")
    ends = step_ends(calls, steps, grank)
    elem = DTYPE_BYTES[dtype]
    # one kernel per batch: the calls of a batch share its start and stop
    batches: dict[tuple[str, int, int, int], Record] = {}
    for c in calls:
        batches.setdefault((str(c["comm"]), int(c["group"]), int(c["rep"]), int(c["batch"])), c)
    origin = min([int(c["start_ns"]) for c in calls] + [int(s["start_ns"]) for s in spans])
    lo, hi = origin, max([int(c["stop_ns"]) for c in calls] + [int(s["end_ns"]) for s in spans])
    first_step = 0
    bounds = [origin, *ends]
    if last_steps is not None and last_steps < len(ends):
        first_step = len(ends) - last_steps
        bounds = bounds[first_step:]
        lo, hi = bounds[0], bounds[-1]

    def us(ns: int) -> float:
        return round((ns - origin) * 1.024) / 1024  # µs on the exact grid (module doc)

    def kernel(name: str, stream: int, start: int, stop: int, args: dict[str, Any]) -> dict[str, Any]:
        return {
            "ph": "X",
            "cat": "kernel",
            "name": name,
            "pid": grank,
            "tid": stream,
            "ts": us(start),
            "dur": us(stop) - us(start),
            "args": {"device": grank, "stream": stream, **args},
        }

    events: list[dict[str, Any]] = []
    for c in sorted(batches.values(), key=lambda c: int(c["start_ns"])):
        start, stop = int(c["start_ns"]), int(c["stop_ns"])
        if stop <= lo or start >= hi:
            continue
        coll = str(c["coll"])
        nin, nout = _elems(coll, int(c["task_bytes"]), int(c["nranks"]), elem)
        typed = f"_Sum_{dtype}" if coll in REDUCING else ""
        name = (
            f"ncclDevKernel_{KERNEL_FUNC[coll]}{typed}_{str(c['algo']).upper()}_{str(c['proto']).upper()}"
            "(ncclDevKernelArgsStorage<4096ul>)"
        )
        meta = {
            "Collective name": COMMS_NAME[coll],
            "In msg nelems": nin,
            "Out msg nelems": nout,
            "dtype": C10_DTYPE[dtype],
            "Group size": int(c["nranks"]),
        }
        events.append(kernel(name, NCCL_STREAM, start, stop, meta))
    for s in spans:
        start, stop = int(s["start_ns"]), int(s["end_ns"])
        if stop <= lo or start >= hi:
            continue
        name = f"emu_compute(comm={s['comm']}, group={s['group']}, rep={s['rep']})"
        events.append(kernel(name, COMPUTE_STREAM, start, stop, {}))
    for n, (a, b) in enumerate(itertools.pairwise(bounds), start=first_step):
        events.append(
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": f"ProfilerStep#{n}",
                "pid": grank,
                "tid": COMPUTE_STREAM,
                "ts": us(a),
                "dur": us(b) - us(a),
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ms"}
