"""Ground truth for the plugin's exposure estimate (docs/online-search.md, "Exposure"), read from a PyTorch
profiler trace: which NCCL calls of a training step the step waited for.

Input: the Chrome trace `torch.profiler.profile(...).export_chrome_trace(path)` writes (`.json`, or gzip'd
whatever the name). The fields read (PyTorch's profiler, Kineto's JSON output):

- GPU kernels: `"ph": "X"`, `"cat": "kernel"` (any case), `ts`/`dur` in µs, `args.device`, `args.stream`,
  `args.correlation`. NCCL's kernels are named `ncclDevKernel_<Func>_...` (NCCL 2.19+) or
  `ncclKernel_<Func>_...`; <Func> gives the collective (AllReduce -> "allreduce", as the plugin names it).
- Collective metadata: `"Collective name"`, `"dtype"`, `"In msg nelems"`, `"Out msg nelems"` in the kernel's
  args (PyTorch copies them from the CPU op to the kernel) or, failing that, in the args of the CPU op
  `record_param_comms` (`cat` `cpu_op`) on the thread and around the time of the kernel's launch: the runtime
  or driver event (`cat` `cuda_runtime` / `cuda_driver`) with the kernel's `args.correlation`. `dtype` in
  c10's spelling (`Float`, `BFloat16`, what record_param_comms writes) or torch's (`float32`).
- Iterations: `ProfilerStep#N` spans (`cat` `user_annotation` or `cpu_op`) that `prof.step()` makes. A kernel
  belongs to the step whose span holds its launch (same process, by time: DDP's all-reduces are launched by
  the autograd thread, not the one that opened the step); a kernel whose launch the trace lacks goes by its
  GPU start into a `gpu_user_annotation` span `ProfilerStep#N` of its device, else it is left out (counted).

Bytes are what the tuner is handed as `nBytes` for the call (the plugin's `bytes`): allreduce, broadcast,
reduce: the buffer (nelems x element size); allgather: the gathered output (`Out msg nelems`); reducescatter:
the input (`In msg nelems`). NCCL hands the tuner the per-rank count times the ranks for those two
(`engine::TimingMatcher::collBytes` does the same sum to match the profiler's Coll events). Several calls NCCL
aggregates into one launch (a group) reach the tuner as one task with the sum of their bytes; PyTorch's
coalesced ops record the same sum.

Definitions, per NCCL kernel (every non-NCCL kernel of the same device is "computation"):

- `overlap_us`: the time within the kernel's [start, end) during which at least one computation kernel runs.
- `exposed_us` = `dur_us` - `overlap_us`: the kernel's time with the computation idle.
- `waited` (the critical-path verdict): no computation kernel runs (start < t < end) at the instant t where
  the kernel ends, or where a later kernel of its back-to-back chain ends. The chain follows the kernel's
  stream while the next NCCL kernel on it starts within `gap_us` (default 20) of the previous one's end: that
  one could not start before this one ended, so what waited for it waited for this one too (a call the
  computation covers, followed on its stream by one it waits for, is on the critical path). The computation,
  or the iteration's end, then waited for the communication. Truth verdict: "exposed" if waited, else
  "hidden". The kernel's own end counts as well as the chain's: an exposed call followed at once by a
  prefetch the computation covers (FSDP's first all-gather and the next) is not made hidden by its chain.

Per position (a call's launch order within its iteration; the iterations whose (coll, bytes) sequence is the
most common one): `waited_share` (share of its iterations that waited), `exposed_fraction` (mean of
exposed_us / dur_us) and the verdict, "exposed" when waited_share >= 0.5.

What the truth does not see: idle computation at a chain's end because the CPU is late launching it (a
launch-bound step) reads as "waited"; memory copies (`gpu_memcpy`, `gpu_memset`) are not computation."""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

NCCL_KERNEL_PREFIXES = ("ncclDevKernel", "ncclKernel")
# NCCL's function names in its kernels' names, as the plugin's trace names the collectives.
_KERNEL_FUNCS = frozenset({"allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv"})
# Element sizes by dtype name, lower-cased: c10::toString(ScalarType) ("Float", "BFloat16": what
# record_param_comms writes) and torch's own names ("float32", "bfloat16": written by newer code paths).
DTYPE_BYTES = {
    "byte": 1,
    "char": 1,
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "short": 2,
    "half": 2,
    "bfloat16": 2,
    "int16": 2,
    "uint16": 2,
    "float16": 2,
    "int": 4,
    "float": 4,
    "int32": 4,
    "uint32": 4,
    "float32": 4,
    "complexhalf": 4,
    "long": 8,
    "double": 8,
    "int64": 8,
    "uint64": 8,
    "float64": 8,
    "complexfloat": 8,
    "complex64": 8,
    "complexdouble": 16,
    "complex128": 16,
}
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
STEP_CATS = ("user_annotation", "cpu_op")
GPU_STEP_CAT = "gpu_user_annotation"
PARAM_COMMS = "record_param_comms"
_STEP = re.compile(r"ProfilerStep#(\d+)")
DEFAULT_GAP_US = 20.0


class TruthError(ValueError):
    """A file that is no Chrome trace."""


# ------------------------------------------------------------------------------------------- the trace


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """The events of a Chrome trace file, plain or gzip'd (told by its first bytes, not its name)."""
    p = Path(path)
    with open(p, "rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    try:
        with gzip.open(p, "rt") if gz else open(p) as f:
            doc = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TruthError(f"{p}: not a readable Chrome trace ({e})") from None
    events = doc.get("traceEvents") if isinstance(doc, dict) else doc
    if not isinstance(events, list):
        raise TruthError(f"{p}: no traceEvents list (not a Chrome trace)")
    return [e for e in events if isinstance(e, dict)]


def nccl_coll(kernel_name: str) -> str | None:
    """The collective of an NCCL kernel's name ('ncclDevKernel_AllReduce_Sum_f32_RING_LL(...)' ->
    'allreduce'); None for a kernel whose name says none (ncclDevKernel_Generic) or no NCCL kernel."""
    if not kernel_name.startswith(NCCL_KERNEL_PREFIXES):
        return None
    parts = kernel_name.split("(", 1)[0].split("_")
    func = parts[1].lower() if len(parts) > 1 else ""
    return func if func in _KERNEL_FUNCS else None


def comms_coll(collective_name: str) -> str | None:
    """The collective of PyTorch's `Collective name` ('_allgather_base', 'reduce_scatter_tensor_coalesced',
    'allreduce', ...)."""
    n = collective_name.lower().replace("_", "")
    for key, coll in (
        ("allreduce", "allreduce"),
        ("reducescatter", "reducescatter"),
        ("allgather", "allgather"),
        ("alltoall", "sendrecv"),
        ("send", "sendrecv"),
        ("recv", "sendrecv"),
        ("broadcast", "broadcast"),
        ("reduce", "reduce"),
    ):
        if key in n:
            return coll
    return None


def dtype_bytes(dtype: Any) -> int | None:
    if not isinstance(dtype, str):
        return None
    name = dtype.strip().strip('"').lower().removeprefix("torch.")
    if name.startswith("float8"):
        return 1
    return DTYPE_BYTES.get(name)


def has_comms_meta(args: dict[str, Any]) -> bool:
    return "In msg nelems" in args and "dtype" in args


def tuner_bytes(coll: str, meta: dict[str, Any]) -> int | None:
    """The call's bytes as the tuner sees them (module doc) from PyTorch's collective metadata."""
    elem = dtype_bytes(meta.get("dtype"))
    try:
        nin = int(meta.get("In msg nelems", 0))
        nout = int(meta.get("Out msg nelems", nin))
    except (TypeError, ValueError):
        return None
    if elem is None:
        return None
    if coll == "allgather":
        return nout * elem
    if coll == "reducescatter":
        return nin * elem
    return (nin or nout) * elem


@dataclass(frozen=True)
class Span:
    start: float
    end: float
    tid: Any = None
    args: dict[str, Any] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class GpuKernel:
    name: str
    start_us: float
    dur_us: float
    device: Any
    stream: Any
    pid: Any
    correlation: int | None
    args: dict[str, Any] = field(compare=False)

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us

    @property
    def is_nccl(self) -> bool:
        return self.name.startswith(NCCL_KERNEL_PREFIXES)


def _span(e: dict[str, Any]) -> Span:
    ts = float(e.get("ts", 0.0))
    return Span(ts, ts + float(e.get("dur", 0.0)), e.get("tid"), e.get("args") or {})


def _complete(e: dict[str, Any]) -> bool:
    return e.get("ph") == "X" and isinstance(e.get("ts"), (int, float))


def gpu_kernels(events: Iterable[dict[str, Any]]) -> list[GpuKernel]:
    out = []
    for e in events:
        if not _complete(e) or str(e.get("cat", "")).lower() != "kernel":
            continue
        args = e.get("args") or {}
        corr = args.get("correlation")
        out.append(
            GpuKernel(
                name=str(e.get("name", "")),
                start_us=float(e["ts"]),
                dur_us=float(e.get("dur", 0.0)),
                device=args.get("device", e.get("pid")),
                stream=args.get("stream", e.get("tid")),
                pid=e.get("pid"),
                correlation=int(corr) if isinstance(corr, (int, float)) else None,
                args=args,
            )
        )
    return out


@dataclass
class TraceIndex:
    """What the trace says about launches and steps, for looking kernels up."""

    launches: dict[int, tuple[Any, Span]]  # correlation -> (pid, the launch call)
    param_comms: dict[tuple[Any, Any], list[Span]]  # (pid, tid) -> record_param_comms spans, by start
    cpu_steps: dict[Any, list[tuple[Span, int]]]  # pid -> (span, step number), by start
    gpu_steps: dict[Any, list[tuple[Span, int]]]  # GPU pid (device) -> (span, step number), by start

    @classmethod
    def of(cls, events: Iterable[dict[str, Any]]) -> TraceIndex:
        idx = cls({}, {}, {}, {})
        for e in events:
            if not _complete(e):
                continue
            cat = str(e.get("cat", "")).lower()
            name = str(e.get("name", ""))
            if cat in LAUNCH_CATS:
                corr = (e.get("args") or {}).get("correlation")
                if isinstance(corr, (int, float)):
                    idx.launches[int(corr)] = (e.get("pid"), _span(e))
            elif cat == "cpu_op" and name == PARAM_COMMS:
                idx.param_comms.setdefault((e.get("pid"), e.get("tid")), []).append(_span(e))
            if (cat in STEP_CATS or cat == GPU_STEP_CAT) and (m := _STEP.fullmatch(name)):
                table = idx.gpu_steps if cat == GPU_STEP_CAT else idx.cpu_steps
                table.setdefault(e.get("pid"), []).append((_span(e), int(m.group(1))))
        for spans in idx.param_comms.values():
            spans.sort(key=lambda s: s.start)
        for steps in [*idx.cpu_steps.values(), *idx.gpu_steps.values()]:
            steps.sort(key=lambda s: s[0].start)
        return idx

    def launch_of(self, k: GpuKernel) -> tuple[Any, Span] | None:
        return self.launches.get(k.correlation) if k.correlation is not None else None

    def comms_meta(self, k: GpuKernel) -> dict[str, Any] | None:
        """The collective metadata of an NCCL kernel: its own args, else those of the innermost
        record_param_comms around its launch on the launching thread."""
        if has_comms_meta(k.args):
            return k.args
        launch = self.launch_of(k)
        if launch is None:
            return None
        pid, call = launch
        best: Span | None = None
        for s in self.param_comms.get((pid, call.tid), []):
            if s.start > call.start:
                break
            if s.end >= call.end and has_comms_meta(s.args) and (best is None or s.start >= best.start):
                best = s
        return best.args if best is not None else None

    def step_of(self, k: GpuKernel) -> int | None:
        """The step whose CPU span holds the kernel's launch, else whose GPU span holds its start."""
        launch = self.launch_of(k)
        if launch is not None:
            pid, call = launch
            return _containing(self.cpu_steps.get(pid, []), call.start)
        return _containing(self.gpu_steps.get(k.pid, []), k.start_us)

    def launch_time(self, k: GpuKernel) -> float:
        launch = self.launch_of(k)
        return launch[1].start if launch is not None else k.start_us


def _containing(spans: list[tuple[Span, int]], t: float) -> int | None:
    i = bisect.bisect_right([s.start for s, _ in spans], t) - 1
    if i >= 0 and spans[i][0].start <= t < spans[i][0].end:
        return spans[i][1]
    return None


# ----------------------------------------------------------------------------------- busy computation


class Busy:
    """The merged intervals during which at least one computation kernel of a device runs."""

    def __init__(self, kernels: Iterable[GpuKernel]) -> None:
        merged: list[list[float]] = []
        for k in sorted(kernels, key=lambda k: k.start_us):
            if merged and k.start_us <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], k.end_us)
            else:
                merged.append([k.start_us, k.end_us])
        self.starts = [a for a, _ in merged]
        self.ends = [b for _, b in merged]

    def overlap(self, start: float, end: float) -> float:
        total = 0.0
        i = bisect.bisect_right(self.ends, start)
        while i < len(self.starts) and self.starts[i] < end:
            total += max(0.0, min(end, self.ends[i]) - max(start, self.starts[i]))
            i += 1
        return total

    def running_at(self, t: float) -> bool:
        i = bisect.bisect_left(self.starts, t) - 1  # the last interval that starts strictly before t
        return i >= 0 and self.ends[i] > t


def chain_waits(kernels: Sequence[GpuKernel], busy: Busy, gap_us: float) -> list[bool]:
    """For the NCCL kernels of one stream (by start), whether the computation waited for each: it is idle
    where the kernel ends, or where a later kernel of its back-to-back chain ends (that one could not start
    before this one ended, so whatever waited for it waited for this one too)."""
    waited = [not busy.running_at(k.end_us) for k in kernels]
    for j in range(len(kernels) - 2, -1, -1):
        if kernels[j + 1].start_us - kernels[j].end_us <= gap_us:
            waited[j] = waited[j] or waited[j + 1]
    return waited


# ----------------------------------------------------------------------------------------- the truth


@dataclass
class KernelTruth:
    iteration: int
    order: int
    coll: str
    bytes: int | None
    start_us: float
    dur_us: float
    stream: Any
    device: Any
    overlap_us: float
    exposed_us: float
    waited: bool
    name: str

    @property
    def verdict(self) -> str:
        return "exposed" if self.waited else "hidden"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict
        for key in ("start_us", "dur_us", "overlap_us", "exposed_us"):
            d[key] = round(d[key], 3)
        return d


@dataclass
class PositionTruth:
    pos: int
    coll: str
    bytes: int | None
    count: int
    waited_share: float
    exposed_fraction: float

    @property
    def verdict(self) -> str:
        return "exposed" if self.waited_share >= 0.5 else "hidden"

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["verdict"] = self.verdict
        d["waited_share"] = round(self.waited_share, 4)
        d["exposed_fraction"] = round(self.exposed_fraction, 4)
        return d


@dataclass
class Truth:
    kernels: list[KernelTruth]
    positions: list[PositionTruth]
    iterations: list[int]  # the steps whose NCCL sequence is the common one (positions are over these)
    reason: str | None = None  # why there is no truth (no kernels, no NCCL kernels, no steps)
    gap_us: float = DEFAULT_GAP_US
    kernels_without_step: int = 0
    other_iterations: list[int] = field(default_factory=list)  # steps with another sequence

    @classmethod
    def none(cls, reason: str, gap_us: float, kernels_without_step: int = 0) -> Truth:
        return cls([], [], [], reason, gap_us, kernels_without_step)

    def to_json(self, max_iterations: int | None = None) -> dict[str, Any]:
        """The summary a result keeps: every position, and the kernels of at most `max_iterations` steps."""
        steps = sorted({k.iteration for k in self.kernels})
        kept = set(steps[:max_iterations] if max_iterations is not None else steps)
        return {
            "reason": self.reason,
            "gap_us": self.gap_us,
            "iterations": self.iterations,
            "other_iterations": self.other_iterations,
            "kernels_without_step": self.kernels_without_step,
            "nccl_kernels": len(self.kernels),
            "positions": [p.to_json() for p in self.positions],
            "kernels": [k.to_json() for k in self.kernels if k.iteration in kept],
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Truth:
        """The positions of a stored summary (what compare needs); the kernels kept in it too."""
        positions = [
            PositionTruth(
                int(p["pos"]),
                str(p["coll"]),
                p.get("bytes"),
                int(p["count"]),
                float(p["waited_share"]),
                float(p["exposed_fraction"]),
            )
            for p in d.get("positions", [])
        ]
        kernels = [
            KernelTruth(**{k: v for k, v in row.items() if k != "verdict"}) for row in d.get("kernels", [])
        ]
        return cls(
            kernels,
            positions,
            list(d.get("iterations", [])),
            d.get("reason"),
            float(d.get("gap_us", DEFAULT_GAP_US)),
            int(d.get("kernels_without_step", 0)),
            list(d.get("other_iterations", [])),
        )


def truth_of_events(events: Sequence[dict[str, Any]], gap_us: float = DEFAULT_GAP_US) -> Truth:
    kernels = gpu_kernels(events)
    if not kernels:
        return Truth.none(
            "the profile holds no GPU kernels (a CPU run, or CUDA activity was not recorded): there is "
            "nothing to take the truth from",
            gap_us,
        )
    nccl = [k for k in kernels if k.is_nccl]
    if not nccl:
        return Truth.none("the profile holds GPU kernels but no NCCL kernel (no NCCL backend?)", gap_us)
    idx = TraceIndex.of(events)
    if not idx.cpu_steps and not idx.gpu_steps:
        return Truth.none("the profile has no ProfilerStep# spans (prof.step() was not called)", gap_us)
    rows, without_step = _kernel_truths(kernels, nccl, idx, gap_us)
    if not rows:
        return Truth.none("no NCCL kernel falls into a ProfilerStep# span", gap_us, without_step)
    positions, common, other = positions_of(rows)
    return Truth(rows, positions, common, None, gap_us, without_step, other)


def truth_of_file(path: str | Path, gap_us: float = DEFAULT_GAP_US) -> Truth:
    return truth_of_events(load_trace(path), gap_us)


def _kernel_truths(
    kernels: list[GpuKernel], nccl: list[GpuKernel], idx: TraceIndex, gap_us: float
) -> tuple[list[KernelTruth], int]:
    computation: dict[Any, list[GpuKernel]] = {k.device: [] for k in kernels}
    streams: dict[tuple[Any, Any], list[GpuKernel]] = {}
    for k in kernels:
        if k.is_nccl:
            streams.setdefault((k.device, k.stream), []).append(k)
        else:
            computation[k.device].append(k)
    busy = {dev: Busy(ks) for dev, ks in computation.items()}
    waited: dict[int, bool] = {}
    for (dev, _), on_stream in streams.items():
        on_stream.sort(key=lambda k: k.start_us)
        for k, w in zip(on_stream, chain_waits(on_stream, busy[dev], gap_us), strict=True):
            waited[id(k)] = w
    by_step: dict[int, list[GpuKernel]] = {}
    without_step = 0
    for k in nccl:
        step = idx.step_of(k)
        if step is None:
            without_step += 1
        else:
            by_step.setdefault(step, []).append(k)
    rows = []
    for step in sorted(by_step):
        for order, k in enumerate(sorted(by_step[step], key=idx.launch_time)):
            meta = idx.comms_meta(k)
            coll = nccl_coll(k.name) or comms_coll(str((meta or {}).get("Collective name", ""))) or "unknown"
            overlap = busy[k.device].overlap(k.start_us, k.end_us)
            rows.append(
                KernelTruth(
                    iteration=step,
                    order=order,
                    coll=coll,
                    bytes=tuner_bytes(coll, meta) if meta is not None else None,
                    start_us=k.start_us,
                    dur_us=k.dur_us,
                    stream=k.stream,
                    device=k.device,
                    overlap_us=overlap,
                    exposed_us=max(0.0, k.dur_us - overlap),
                    waited=waited[id(k)],
                    name=k.name.split("(", 1)[0],
                )
            )
    return rows, without_step


def positions_of(rows: Sequence[KernelTruth]) -> tuple[list[PositionTruth], list[int], list[int]]:
    """Per position, over the iterations whose (coll, bytes) sequence is the most common one: (positions,
    those iterations, the other iterations)."""
    seqs: dict[int, list[KernelTruth]] = {}
    for r in rows:
        seqs.setdefault(r.iteration, []).append(r)
    for seq in seqs.values():
        seq.sort(key=lambda r: r.order)
    sig = {it: tuple((r.coll, r.bytes) for r in seq) for it, seq in seqs.items()}
    common_sig, _ = Counter(sig.values()).most_common(1)[0]
    common = sorted(it for it in seqs if sig[it] == common_sig)
    other = sorted(it for it in seqs if sig[it] != common_sig)
    positions = []
    for pos, (coll, nbytes) in enumerate(common_sig):
        at = [seqs[it][pos] for it in common]
        positions.append(
            PositionTruth(
                pos=pos,
                coll=coll,
                bytes=nbytes,
                count=len(at),
                waited_share=sum(r.waited for r in at) / len(at),
                exposed_fraction=sum(r.exposed_us / r.dur_us if r.dur_us > 0 else 0.0 for r in at) / len(at),
            )
        )
    return positions, common, other


# ------------------------------------------------------------------------- against the estimate


@dataclass
class CompareRow:
    pos: int
    coll: str
    bytes: int | None
    verdict: str  # the estimator's: exposed, hidden, unknown
    slope: float | None
    se: float | None
    truth_pos: int | None
    truth_verdict: str | None
    waited_share: float | None
    exposed_fraction: float | None
    matched: bool  # the truth's position has the estimator's collective (and bytes, where both have them)
    agree: bool | None  # None: the estimator says unknown, or no matching truth


@dataclass
class TaskRow:
    """One task of the estimator's per-task regression (the record's `tasks`) against the truth of the
    positions it holds: exposed when its calls were waited for in half the profiled steps or more, on
    average."""

    coll: str
    bytes: int | None
    calls: int
    verdict: str  # the estimator's: exposed, hidden, unknown
    slope: float | None  # the calls' mean exposure
    se: float | None
    truth_verdict: str | None
    matched_positions: int  # its positions matched to a profiled call: the truth's columns are over these
    exposed_positions: int | None  # of those, the ones the truth calls exposed
    waited_share: float | None  # mean over them
    exposed_fraction: float | None
    agree: bool | None  # None: the estimator says unknown, or no matching truth


@dataclass
class Comparison:
    rows: list[CompareRow]
    rotation: int | None  # the truth position of the estimator's position 0
    ambiguous: list[int]  # other rotations that match as well
    notes: list[str]
    comm: str = ""
    rank: int | None = None
    tasks: list[TaskRow] = field(default_factory=list)

    @property
    def counts(self) -> dict[str, int]:
        return _verdict_counts(self.rows) | {"unmatched": sum(not r.matched for r in self.rows)}

    @property
    def task_counts(self) -> dict[str, int]:
        return _verdict_counts(self.tasks)

    def to_json(self) -> dict[str, Any]:
        return {
            "comm": self.comm,
            "rank": self.rank,
            "rotation": self.rotation,
            "ambiguous": self.ambiguous,
            "notes": self.notes,
            "counts": self.counts,
            "rows": [asdict(r) for r in self.rows],
            "task_counts": self.task_counts,
            "tasks": [asdict(t) for t in self.tasks],
        }

    def markdown(self) -> str:
        c = self.counts
        head = [
            f"## communicator {self.comm or '?'} (rank {self.rank if self.rank is not None else '?'})",
            "",
            verdict_counts_text(c)
            + (f", {c['unmatched']} without a matching call in the profile" if c["unmatched"] else "")
            + f" of {len(self.rows)} positions.",
        ]
        if self.notes:
            head += [""] + [f"- {n}" for n in self.notes]
        text = "\n".join(head) + "\n\n" + to_markdown(self.rows)
        if self.tasks:
            t = self.task_counts
            text += (
                "\nPer task (one regressor a task: its calls' summed window; the slope is their mean "
                f"exposure): {verdict_counts_text(t)} of {len(self.tasks)} tasks.\n\n"
                + tasks_markdown(self.tasks)
            )
        return text


def verdict_counts_text(counts: dict[str, int]) -> str:
    """ "2 right, 1 wrong, 0 unknown": a comparison's `counts` or `task_counts`."""
    return (
        f"{counts.get('right', 0)} right, {counts.get('wrong', 0)} wrong, {counts.get('unknown', 0)} unknown"
    )


def _verdict_counts(items: Sequence[CompareRow | TaskRow]) -> dict[str, int]:
    return {
        "right": sum(x.agree is True for x in items),
        "wrong": sum(x.agree is False for x in items),
        "unknown": sum(x.verdict == "unknown" for x in items),
    }


def _same_call(est: dict[str, Any], t: PositionTruth, with_bytes: bool) -> bool:
    if str(est.get("coll")) != t.coll:
        return False
    if not with_bytes or t.bytes is None or est.get("bytes") is None:
        return True
    return int(est["bytes"]) == t.bytes


def best_rotation(est: Sequence[dict[str, Any]], truth: Sequence[PositionTruth]) -> tuple[int, list[int]]:
    """The truth position of the estimator's first position: the rotation with the most (coll, bytes)
    matches, then the most coll matches; (it, the other rotations that score the same)."""
    k = len(truth)

    def score(r: int) -> tuple[int, int]:
        pairs = [(e, truth[(r + p) % k]) for p, e in enumerate(est)]
        return sum(_same_call(e, t, True) for e, t in pairs), sum(_same_call(e, t, False) for e, t in pairs)

    scores = {r: score(r) for r in range(k)}
    best = max(scores.values())
    tied = [r for r in range(k) if scores[r] == best]
    return tied[0], tied[1:]


def compare(truth: Truth, exposure: dict[str, Any]) -> Comparison:
    """The estimator's positions (an `exposure` trace record) against the truth's per-position verdicts.
    The estimator's iteration may start at any call: its positions are aligned to the truth's as the rotation
    that matches best (module doc of best_rotation); ties are reported, not resolved by guessing."""
    est = list(exposure.get("positions") or [])
    comm, rank = str(exposure.get("comm", "")), exposure.get("rank")
    if exposure.get("out_of_bounds") is True:
        bounds_note = (
            "a task's slope lies outside 0-1 by more than 3 standard errors: its windows move with the "
            "iteration for more than their own time (a wait for a peer, contention), so no verdict is given"
        )
    else:
        bounds_note = ""
    if truth.reason or not truth.positions:
        rows = [_row(e, None, False) for e in est]
        tasks = [_task_row(task, rows) for task in record_dicts(exposure.get("tasks"))]
        notes = [f"no truth: {truth.reason or 'no positions'}"] + ([bounds_note] if bounds_note else [])
        return Comparison(rows, None, [], notes, comm, rank, tasks)
    if not est:
        return Comparison([], None, [], ["the exposure record has no positions"], comm, rank)
    k = len(truth.positions)
    rotation, ties = best_rotation(est, truth.positions)
    notes = [bounds_note] if bounds_note else []
    if not any(_same_call(e, t, False) for e in est for t in truth.positions):
        notes.append(
            "no call of the estimator's iteration is among the profile's calls (another communicator?)"
        )
        ties = []
    if len(est) != k:
        notes.append(
            f"period differs: the estimator's iteration has {len(est)} calls, the profile's {k} NCCL kernels"
        )
    if ties:
        shown = ", ".join(str(r) for r in [rotation, *ties][:8]) + (", ..." if len(ties) > 7 else "")
        notes.append(f"ambiguous alignment: rotations {shown} match equally; rotation {rotation} is shown")
    if any(p.bytes is None for p in truth.positions):
        notes.append("the profile gave no bytes for some calls: those matched on the collective alone")
    if truth.other_iterations:
        notes.append(
            f"profiled steps {', '.join(map(str, truth.other_iterations))} had another call sequence and are "
            "left out"
        )
    rows = []
    for p, e in enumerate(est):
        t = truth.positions[(rotation + p) % k]
        rows.append(_row(e, t, _same_call(e, t, True)))
    tasks = [_task_row(task, rows) for task in record_dicts(exposure.get("tasks"))]
    return Comparison(rows, rotation, ties, notes, comm, rank, tasks)


def record_dicts(v: Any) -> list[dict[str, Any]]:
    """The dicts of a record's list field (a damaged record's other entries left out)."""
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _task_row(task: dict[str, Any], rows: Sequence[CompareRow]) -> TaskRow:
    """A task of the record against the truth of the positions it names (those matched to a profiled call)."""
    verdict = str(task.get("verdict", "unknown"))
    listed = task.get("positions")
    at = [p for p in (listed if isinstance(listed, list) else []) if whole_number(p) is not None]
    at = [p for p in at if 0 <= p < len(rows)]
    truths = [rows[p] for p in at if rows[p].matched and rows[p].waited_share is not None]
    calls = whole_number(task.get("calls"))
    waited = sum(r.waited_share or 0.0 for r in truths) / len(truths) if truths else None
    exposed = sum(r.exposed_fraction or 0.0 for r in truths) / len(truths) if truths else None
    truth_verdict = None if waited is None else ("exposed" if waited >= 0.5 else "hidden")
    agree = verdict == truth_verdict if truth_verdict and verdict in ("exposed", "hidden") else None
    return TaskRow(
        coll=str(task.get("coll", "")),
        bytes=task.get("bytes"),
        calls=len(at) if calls is None else calls,
        verdict=verdict,
        slope=_num(task.get("slope")),
        se=_num(task.get("se")),
        truth_verdict=truth_verdict,
        matched_positions=len(truths),
        exposed_positions=sum(r.truth_verdict == "exposed" for r in truths) if truths else None,
        waited_share=waited,
        exposed_fraction=exposed,
        agree=agree,
    )


def whole_number(v: Any) -> int | None:
    """An int field of a trace record, or None (absent, damaged, or a bool)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _num(v: Any) -> float | None:
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return float(v) if ok else None


def _row(est: dict[str, Any], t: PositionTruth | None, matched: bool) -> CompareRow:
    verdict = str(est.get("verdict", "unknown"))
    agree = None
    if t is not None and matched and verdict in ("exposed", "hidden"):
        agree = verdict == t.verdict
    return CompareRow(
        pos=int(est.get("pos", 0)),
        coll=str(est.get("coll", "")),
        bytes=est.get("bytes"),
        verdict=verdict,
        slope=_num(est.get("slope")),
        se=_num(est.get("se")),
        truth_pos=t.pos if t is not None else None,
        truth_verdict=t.verdict if t is not None else None,
        waited_share=t.waited_share if t is not None else None,
        exposed_fraction=t.exposed_fraction if t is not None else None,
        matched=matched,
        agree=agree,
    )


def _cell(v: float | None, fmt: str) -> str:
    return format(v, fmt) if v is not None else "–"


def slope_cell(slope: Any, se: Any) -> str:
    """ "0.93 ± 0.05" of a slope and its standard error; "–" without a slope."""
    slope, se = _num(slope), _num(se)
    return f"{_cell(slope, '.2f')} ± {_cell(se, '.2f')}" if slope is not None else "–"


def _agree_cell(agree: bool | None) -> str:
    return "–" if agree is None else ("yes" if agree else "**no**")


def _table(head: Sequence[str], body: Iterable[Sequence[Any]]) -> str:
    """A markdown table; a cell that is None reads "–"."""
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join("–" if c is None else str(c) for c in row) + " |" for row in body]
    return "\n".join(lines) + "\n"


def to_markdown(rows: Sequence[CompareRow]) -> str:
    head = ("pos", "coll", "bytes", "estimator", "slope ± se", "truth pos", "truth", "waited share",
            "exposed fraction", "agree")  # fmt: skip
    return _table(
        head,
        (
            (
                r.pos,
                r.coll,
                r.bytes,
                r.verdict,
                slope_cell(r.slope, r.se),
                r.truth_pos,
                (r.truth_verdict or "–") + ("" if r.matched or r.truth_pos is None else " (other call)"),
                _cell(r.waited_share, ".2f"),
                _cell(r.exposed_fraction, ".2f"),
                _agree_cell(r.agree),
            )
            for r in rows
        ),
    )


def tasks_markdown(tasks: Sequence[TaskRow]) -> str:
    head = ("coll", "bytes", "calls", "estimator", "mean exposure ± se", "truth",
            "exposed of matched positions", "waited share", "exposed fraction", "agree")  # fmt: skip
    return _table(
        head,
        (
            (
                t.coll,
                t.bytes,
                t.calls,
                t.verdict,
                slope_cell(t.slope, t.se),
                t.truth_verdict,
                None if t.exposed_positions is None else f"{t.exposed_positions} of {t.matched_positions}",
                _cell(t.waited_share, ".2f"),
                _cell(t.exposed_fraction, ".2f"),
                _agree_cell(t.agree),
            )
            for t in tasks
        ),
    )


# --------------------------------------------------------------------------------- a launch's files


def profiled_iterations(iters: int, recorded: int) -> tuple[int, int] | None:
    """[first, end) of the iterations `bench train --torch-profile N` runs under the profiler: one warm-up
    iteration, then the N recorded ones; the last iteration runs unprofiled. None with N = 0."""
    return (iters - recorded - 2, iters - 1) if recorded > 0 and iters > recorded + 1 else None


def profile_name(label: str, rank: int) -> str:
    """The file a `bench train --torch-profile` launch writes per rank, named by the launch's label as the
    runner names its folder."""
    safe = "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in label)
    return f"profile-{safe}-rank{rank}.json.gz"


def exposure_records(records: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r.get("ev") == "exposure"]


def launch_report(
    folder: Path, label: str, rank0_truth: dict[str, Any], exposures: Sequence[dict[str, Any]]
) -> tuple[str, list[Comparison]]:
    """exposure-truth.md of a launch: each exposure record against the truth of its own rank's profile
    where that file is in `folder` (this host's ranks), else against rank 0's (`rank0_truth`, said so)."""
    comparisons = []
    for rec in exposures:
        rank = int(rec.get("rank", 0))
        path = folder / profile_name(label, rank)
        note = None
        if rank != 0 and path.is_file():
            truth = truth_of_file(path, float(rank0_truth.get("gap_us", DEFAULT_GAP_US)))
        else:
            truth = Truth.from_json(rank0_truth)
            if rank != 0:
                note = f"the profile of rank {rank} is not on this host: compared with rank 0's"
        c = compare(truth, rec)
        if note:
            c.notes.insert(0, note)
        comparisons.append(c)
    lines = [
        f"# exposure estimate against the profiler's truth: {label}",
        "",
        "Truth from torch.profiler (autoccl.bench.exposure_truth): a call is exposed when no computation "
        "kernel runs where it, or a later call of its back-to-back chain on its stream, ends; `waited share` "
        "is the share of the "
        "profiled steps in which it was, `exposed fraction` its mean time with the computation idle. The "
        "estimator's positions are aligned to the profile's calls as the best-matching rotation.",
    ]
    for c in comparisons:
        lines += ["", c.markdown().rstrip("\n")]
    return "\n".join(lines) + "\n", comparisons
