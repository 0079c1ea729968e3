"""Execution plans: a synthesized (or baseline) schedule in the form the executor runs.

A plan is the synthesizer's schedule (docs/synth.md, "Schedule JSON") reduced to what execution needs:
the collective, the chunk owners, and the transfers (chunk, source rank, destination rank, start, end,
copy or reduce). Plans are independent of the tensor size they run on: chunk c of the collective's buffer
is a fixed share of whatever tensor is given (sizes that do not divide evenly are split as numpy's
`array_split` does, the same on every rank); `bytes` and `time_us` record the size the plan was made for
and the synthesizer's predicted time at that size.

The per-rank program (`Plan.program(rank)`) lists the rank's sends and receives in one global order:
transfer start time, then transfer index. Every rank issues its operations in that order, so a rank only
ever waits for a transfer that started earlier in the schedule, which the peer has already issued: the
execution cannot deadlock, whatever the backend's matching rules (tags for gloo, FIFO per peer for NCCL).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from autoccl import jsonout

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")

COPY, REDUCE = 0, 1
SEND, RECV = 0, 1


class PlanError(ValueError):
    """A schedule that cannot be executed (malformed, or not for this collective/rank count)."""


@dataclass(frozen=True)
class Op:
    """One send or receive of one rank, in issue order."""

    index: int  # transfer index in the plan (also the message tag)
    kind: int  # SEND or RECV
    chunk: int
    peer: int  # plan rank of the other side
    reduce: bool  # the receiver reduces the payload into its copy (else replaces it)
    start_us: float
    end_us: float
    direct: bool = False  # RECV copy: land in the chunk's region (no staging buffer)


@dataclass(frozen=True)
class Plan:
    collective: str
    nranks: int
    nchunks: int
    chunks_per_rank: int
    root: int
    owner: tuple[int, ...]
    chunk: np.ndarray
    src: np.ndarray
    dst: np.ndarray
    op: np.ndarray
    start_us: np.ndarray
    end_us: np.ndarray
    bytes: float = 0.0
    time_us: float = 0.0
    algorithm: str = ""
    topology: str = ""
    _programs: dict[int, list[Op]] = field(default_factory=dict, repr=False, compare=False)

    # ---- construction ------------------------------------------------------------------------------
    def __post_init__(self) -> None:
        if self.collective not in COLLECTIVES:
            raise PlanError(
                f"unknown collective {self.collective!r}; expected one of {', '.join(COLLECTIVES)}"
            )
        if self.nranks < 1 or self.nchunks < 1:
            raise PlanError("a plan needs at least one rank and one chunk")
        if len(self.owner) != self.nchunks:
            raise PlanError(f"owner has {len(self.owner)} entries for {self.nchunks} chunks")
        n = len(self.chunk)
        for name in ("src", "dst", "op", "start_us", "end_us"):
            if len(getattr(self, name)) != n:
                raise PlanError(f"transfer column {name} has {len(getattr(self, name))} rows, expected {n}")
        if n:
            if self.chunk.min() < 0 or self.chunk.max() >= self.nchunks:
                raise PlanError("a transfer names a chunk outside 0..nchunks-1")
            for name in ("src", "dst"):
                col = getattr(self, name)
                if col.min() < 0 or col.max() >= self.nranks:
                    raise PlanError(f"a transfer's {name} rank is outside 0..{self.nranks - 1}")
            if np.any(self.src == self.dst):
                raise PlanError("a transfer sends a chunk from a rank to itself")
            if np.any((self.op != COPY) & (self.op != REDUCE)):
                raise PlanError("transfer op must be 0 (copy) or 1 (reduce)")
        if any(o < 0 or o >= self.nranks for o in self.owner):
            raise PlanError("an owner rank is outside the plan's ranks")
        if self.collective in ("allgather", "broadcast") and n and np.any(self.op == REDUCE):
            raise PlanError(f"a {self.collective} plan cannot contain reductions")

    @staticmethod
    def from_schedule(schedule: Any, topology: Any | None = None, name: str = "") -> Plan:
        """From an `autoccl.synth` Schedule. Untimed schedules (baselines) are timed by the synthesizer's
        simulator on `topology`, or, without one, ordered by their step numbers."""
        sched = schedule
        if not bool(schedule.timed):
            if topology is not None:
                from autoccl import synth

                sched = synth.simulate(topology, schedule)["timed"]
        cols = sched.transfer_columns()
        start = np.asarray(cols["start_us"], dtype=np.float64)
        end = np.asarray(cols["end_us"], dtype=np.float64)
        if not bool(sched.timed):
            step = np.asarray(cols["step"], dtype=np.float64)
            start, end = step, step + 0.5
        return Plan(
            collective=str(sched.collective),
            nranks=int(sched.nranks),
            nchunks=int(sched.nchunks),
            chunks_per_rank=int(sched.chunks_per_rank),
            root=int(sched.root),
            owner=tuple(int(x) for x in sched.owner),
            chunk=np.asarray(cols["chunk"], dtype=np.int64),
            src=np.asarray(cols["src"], dtype=np.int64),
            dst=np.asarray(cols["dst"], dtype=np.int64),
            op=np.asarray(cols["op"], dtype=np.int64),
            start_us=start,
            end_us=end,
            bytes=float(sched.bytes),
            time_us=float(sched.time_us) if bool(sched.timed) else 0.0,
            algorithm=str(sched.algorithm),
            topology=name or (str(topology.name) if topology is not None else ""),
        )

    @staticmethod
    def from_dict(data: dict[str, Any], source: str = "plan") -> Plan:
        """From a schedule document (format `autoccl-schedule` v1, or v2 as `autoccl synth -o` writes; v2's
        extra column, each transfer's reduction order, is not used by the executor)."""
        if (
            not isinstance(data, dict)
            or data.get("format") != "autoccl-schedule"
            or data.get("version") not in (1, 2)
        ):
            raise PlanError(f"{source}: not an autoccl-schedule v1 or v2 document")
        fields = ["chunk", "src", "dst", "start_us", "end_us", "op", "route", "step"]
        if data["version"] == 2:
            fields.append("order")
        if data.get("transfer_fields") != fields:
            raise PlanError(f"{source}: transfer_fields must be {fields}")
        try:
            rows = np.asarray(data["transfers"], dtype=np.float64).reshape(-1, len(fields))
            timed = bool(len(rows) == 0 or (rows[:, 3] >= 0).all())
            start = rows[:, 3] if timed else rows[:, 7]
            end = rows[:, 4] if timed else rows[:, 7] + 0.5
            return Plan(
                collective=str(data["collective"]),
                nranks=int(data["nranks"]),
                nchunks=int(data["nchunks"]),
                chunks_per_rank=int(data.get("chunks_per_rank", 1)),
                root=int(data.get("root", 0)),
                owner=tuple(int(x) for x in data["owner"]),
                chunk=rows[:, 0].astype(np.int64),
                src=rows[:, 1].astype(np.int64),
                dst=rows[:, 2].astype(np.int64),
                op=rows[:, 5].astype(np.int64),
                start_us=start.copy(),
                end_us=end.copy(),
                bytes=float(data.get("bytes", 0.0)),
                time_us=float(data.get("time_us", 0.0)) if timed else 0.0,
                algorithm=str(data.get("algorithm", "")),
                topology=str(data.get("topology", "")),
            )
        except (KeyError, TypeError, ValueError) as e:
            if isinstance(e, PlanError):
                raise
            raise PlanError(f"{source}: malformed schedule ({e})") from e

    @staticmethod
    def load(path: str | Path) -> Plan:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise PlanError(f"{p}: not valid JSON: {e}") from e
        return Plan.from_dict(data, source=str(p))

    def to_dict(self) -> dict[str, Any]:
        rows = [
            [int(c), int(s), int(d), float(a), float(b), int(o), -1, 0]
            for c, s, d, a, b, o in zip(
                self.chunk, self.src, self.dst, self.start_us, self.end_us, self.op, strict=True
            )
        ]
        return {
            "format": "autoccl-schedule",
            "version": 1,
            "collective": self.collective,
            "algorithm": self.algorithm,
            "nranks": self.nranks,
            "nchunks": self.nchunks,
            "chunks_per_rank": self.chunks_per_rank,
            "root": self.root,
            "chunk_bytes": self.bytes / max(self.nchunks, 1),
            "bytes": self.bytes,
            "time_us": self.time_us,
            "owner": list(self.owner),
            "topology": self.topology,
            "transfer_fields": ["chunk", "src", "dst", "start_us", "end_us", "op", "route", "step"],
            "transfers": rows,
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(jsonout.dumps(self.to_dict()))

    @property
    def num_transfers(self) -> int:
        return len(self.chunk)

    # ---- per-rank program -------------------------------------------------------------------------
    def issue_order(self) -> np.ndarray:
        """Transfer indices in the global issue order: start time, then index."""
        return np.lexsort((np.arange(self.num_transfers), self.start_us))

    def program(self, rank: int) -> list[Op]:
        """The rank's sends and receives in issue order (cached)."""
        if not 0 <= rank < self.nranks:
            raise PlanError(f"rank {rank} is outside the plan's {self.nranks} ranks")
        cached = self._programs.get(rank)
        if cached is not None:
            return cached
        ops: list[Op] = []
        for i in self.issue_order().tolist():
            s, d = int(self.src[i]), int(self.dst[i])
            if s != rank and d != rank:
                continue
            c = int(self.chunk[i])
            red = bool(self.op[i] == REDUCE)
            a, b = float(self.start_us[i]), float(self.end_us[i])
            if s == rank:
                ops.append(Op(i, SEND, c, d, red, a, b))
            else:
                ops.append(Op(i, RECV, c, s, red, a, b, direct=not red and self._copy_lands_safely(i, rank)))
        self._programs[rank] = ops
        return ops

    def _copy_lands_safely(self, i: int, rank: int) -> bool:
        """A copy may land straight in the chunk's region unless, while it is in flight, the rank sends
        the chunk (which must carry the old value) or another receive into the chunk completes (which
        must be ordered before or after the copy)."""
        c, a, b = self.chunk[i], self.start_us[i], self.end_us[i]
        same = self.chunk == c
        sends = same & (self.src == rank) & (self.start_us >= a) & (self.start_us < b)
        if np.any(sends & (np.arange(self.num_transfers) != i)):
            return False
        overlapping = same & (self.dst == rank) & (self.end_us > a) & (self.start_us < b)
        return not bool(np.any(overlapping & (np.arange(self.num_transfers) != i)))

    def describe(self) -> str:
        t = f", predicted {self.time_us:.1f} us at {self.bytes:.0f} B" if self.time_us else ""
        return (
            f"{self.collective} plan ({self.algorithm or 'schedule'}) for {self.nranks} ranks, "
            f"{self.nchunks} chunks, {self.num_transfers} transfers{t}"
        )


def split_sizes(total: int, parts: int) -> list[int]:
    """`total` elements in `parts` pieces as numpy's array_split does (the first ones one larger)."""
    base, extra = divmod(total, parts)
    return [base + (1 if k < extra else 0) for k in range(parts)]


def owned_chunks(plan: Plan) -> list[list[int]]:
    """Per rank, the chunks it owns, ascending."""
    out: list[list[int]] = [[] for _ in range(plan.nranks)]
    for c, r in enumerate(plan.owner):
        out[r].append(c)
    return out
