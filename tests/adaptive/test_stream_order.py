"""The executor on a transport whose waits do not block the host (NCCL: a wait orders the caller's CUDA stream
after the transfer), checked by a model of the two streams every rank has.

Every rank runs its program against a recording transport; nothing moves. The records are replayed as
happens-before edges: the current stream's operations (combines, copies, stream waits) in issue order; the
transfer stream's batches in issue order, each starting after the current stream's work issued before it
(torch.distributed's NCCL work waits for the current stream); a wait puts the batch's end before what the
current stream runs next; a batch ends only after every batch holding a matching operation on a peer has
started. A cycle is a deadlock. Two accesses to overlapping memory, one of them a write, that no path orders
are a race: the data a collective produces would then depend on timing. Ordered the wrong way is wrong too:
each transfer must read and write its memory as if it ran where the executor walked it (a send carries the
chunk as it was at that point of the program, a receive lands after what came before it there and before
what comes after). (Host waits, gloo's, are not this model's subject: there the executor issues the batch
at every wait, and the gloo suites run the data.)
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
import torch

from autoccl import synth
from autoccl.adaptive import collectives as C
from autoccl.adaptive import executor
from autoccl.adaptive.jobs import generated_doc
from autoccl.adaptive.plan import Plan
from autoccl.adaptive.transport import _CONNECT_TAG, RECV, SEND, Handle, Message


def _span(t: torch.Tensor) -> tuple[int, int]:
    lo = t.data_ptr()
    return lo, lo + t.numel() * t.element_size()


@dataclass
class _Log:
    """One rank's records in host order: ("walk", kind, peer, tag, span) when the executor takes a transfer
    into its batch, ("batch", id, [(kind, peer, tag, span)]) when it issues one, ("wait", id),
    ("op", writes: span, reads: [span]) for a copy or an add on the current stream."""

    events: list[tuple[Any, ...]] = field(default_factory=list)


class _Wait:
    def __init__(self, log: _Log, batch: int, forget: bool) -> None:
        self.log, self.batch, self.forget = log, batch, forget

    def wait(self) -> bool:
        if not self.forget:
            self.log.events.append(("wait", self.batch))
        return True


class _StreamTransport:
    """Records batches; one handle completes a whole batch, as NCCL's coalesced work does."""

    def __init__(self, rank: int, size: int, log: _Log, blocking: bool, forget_waits: bool = False) -> None:
        self.rank, self.size, self.log = rank, size, log
        self.waits_block_host = blocking
        self.symmetric_first_exchange = True  # as NCCL's: each peer met first with a send and a receive
        self.forget_waits = forget_waits
        self.batches = 0

    def issue(self, messages: Sequence[Message]) -> list[Handle]:
        b = self.batches
        self.batches += 1
        self.log.events.append(("batch", b, [(m.kind, m.peer, m.tag, _span(m.tensor)) for m in messages]))
        return [_Wait(self.log, b, self.forget_waits)] * len(messages)


_REAL_COPY = torch.Tensor.copy_
_REAL_ADD = torch.Tensor.add_


def _record(plan: Plan, blocking: bool, forget_waits: bool = False) -> list[_Log]:
    """Every rank's records for one run of `plan` (each rank's program alone: no data moves)."""
    logs = []
    for rank in range(plan.nranks):
        log = _Log()
        t = _StreamTransport(rank, plan.nranks, log, blocking, forget_waits)

        def copy(self: torch.Tensor, src: torch.Tensor, *a: Any, _log: _Log = log, **k: Any) -> torch.Tensor:
            _log.events.append(("op", _span(self), [_span(src)]))
            return _REAL_COPY(self, src, *a, **k)

        def add(self: torch.Tensor, other: Any, *a: Any, _log: _Log = log, **k: Any) -> torch.Tensor:
            reads = [_span(other)] if isinstance(other, torch.Tensor) else []
            _log.events.append(("op", _span(self), [*reads, _span(self)]))
            return _REAL_ADD(self, other, *a, **k)

        def walk(kind: int, tensor: torch.Tensor, peer: int, tag: int, _log: _Log = log) -> Message:
            _log.events.append(("walk", kind, peer, tag, _span(tensor)))
            return Message(kind, tensor, peer, tag)

        n = 6 * plan.nranks * plan.nchunks
        torch.Tensor.copy_ = copy  # type: ignore[method-assign]
        torch.Tensor.add_ = add  # type: ignore[method-assign]
        executor.Message = walk  # type: ignore[assignment,misc]
        try:
            if plan.collective == "allreduce":
                C.all_reduce(torch.ones(n), plan, transport=t)
            elif plan.collective == "allgather":
                C.all_gather_into_tensor(torch.empty(n), torch.ones(n // plan.nranks), plan, transport=t)
            elif plan.collective == "reducescatter":
                C.reduce_scatter_tensor(torch.empty(n // plan.nranks), torch.ones(n), plan, transport=t)
            elif plan.collective == "broadcast":
                C.broadcast(torch.ones(n), plan, transport=t)
            else:
                C.reduce(torch.ones(n), plan, transport=t)
        finally:
            torch.Tensor.copy_ = _REAL_COPY  # type: ignore[method-assign]
            torch.Tensor.add_ = _REAL_ADD  # type: ignore[method-assign]
            executor.Message = Message  # type: ignore[misc]
        logs.append(log)
    return logs


def _overlap(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _check(logs: list[_Log]) -> list[str]:
    """Deadlocks and races of the replayed records; [] when there are none."""
    succ: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}

    def edge(u: tuple[Any, ...], v: tuple[Any, ...]) -> None:
        succ.setdefault(u, set()).add(v)
        succ.setdefault(v, set())

    accesses = []  # (rank, node, span, writes)
    where: dict[tuple[int, int, int, int], int] = {}  # (rank, kind, peer, tag) -> batch
    walks = []  # (rank, host index, kind, peer, tag, span)
    ops = []  # (rank, host index, node, writes, reads)
    for r, log in enumerate(logs):
        cur: tuple[Any, ...] | None = None  # the current stream's latest node
        prev_end: tuple[Any, ...] | None = None
        for i, ev in enumerate(log.events):
            if ev[0] == "walk":
                walks.append((r, i, *ev[1:]))
            elif ev[0] == "batch":
                b = ev[1]
                start, end = ("S", r, b), ("E", r, b)
                edge(start, end)
                if cur is not None:
                    edge(cur, start)
                if prev_end is not None:
                    edge(prev_end, start)
                prev_end = end
                for kind, peer, tag, span in ev[2]:
                    where[(r, kind, peer, tag)] = b
                    accesses.append((r, ("B", r, b), span, kind == RECV))
            else:
                node = ("C", r, i)
                succ.setdefault(node, set())
                if cur is not None:
                    edge(cur, node)
                if ev[0] == "wait":
                    edge(("E", r, ev[1]), node)
                else:
                    accesses.append((r, node, ev[1], True))
                    accesses += [(r, node, s, False) for s in ev[2]]
                    ops.append((r, i, node, ev[1], ev[2]))
                cur = node
    for (r, kind, peer, tag), b in where.items():
        other = where.get((peer, RECV if kind == SEND else SEND, r, tag))
        assert other is not None, f"rank {r}'s message {tag} to/from {peer} has no match"
        edge(("S", peer, other), ("E", r, b))
    # happens-before: reachability over the edges (the graphs are small)
    order: list[tuple[Any, ...]] = []
    state: dict[tuple[Any, ...], int] = {}
    for root in list(succ):
        if root in state:
            continue
        stack = [(root, iter(sorted(succ[root])))]
        state[root] = 1
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                state[node] = 2
                order.append(node)
                stack.pop()
            elif state.get(nxt) == 1:
                return [f"deadlock: a cycle through {nxt}"]
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(sorted(succ[nxt]))))
    reach: dict[tuple[Any, ...], set[tuple[Any, ...]]] = {}
    for node in order:  # successors first
        acc: set[tuple[Any, ...]] = set()
        for s in succ[node]:
            acc.add(s)
            acc |= reach[s]
        reach[node] = acc

    def before(u: tuple[Any, ...], v: tuple[Any, ...]) -> bool:
        """u ends before v begins; a batch B spans S..E."""
        u_end = ("E", *u[1:]) if u[0] == "B" else u
        v_start = ("S", *v[1:]) if v[0] == "B" else v
        return v_start in reach[u_end]

    races = []
    for r, i, kind, peer, tag, span in walks:  # each transfer where the executor walked it
        batch = ("B", r, where[(r, kind, peer, tag)])
        for r2, j, node, writes, reads in ops:
            # a send reads its bytes: what writes them conflicts; a receive writes: what touches them does
            touched = [writes] if kind == SEND else [writes, *reads]
            if r2 != r or not any(_overlap(span, x) for x in touched):
                continue
            if not (before(batch, node) if i < j else before(node, batch)):
                races.append(f"rank {r}: transfer {tag} and {node} ordered against the program")
    for (r1, n1, s1, w1), (r2, n2, s2, w2) in itertools.combinations(accesses, 2):
        if r1 != r2 or (n1 == n2 and n1[0] != "B") or not (w1 or w2) or not _overlap(s1, s2):
            continue
        if n1 == n2 or not (before(n1, n2) or before(n2, n1)):
            races.append(f"rank {r1}: {n1} and {n2} touch the same bytes unordered")
    return races


def _plans() -> list[tuple[str, Plan]]:
    out = []
    for spec, colls in (
        ("fc:2", ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")),
        ("ring:4", ("allreduce", "allgather", "reducescatter", "broadcast", "reduce")),
        ("torus:2x2", ("allreduce", "reducescatter")),
    ):
        topo = synth.topology_from_dict(generated_doc(spec))
        for coll in colls:
            for chunks in (1, 2):
                sched, _ = synth.synthesize(topo, coll, float(1 << 24), chunks=chunks, seeds=2)
                out.append((f"{spec}/{coll}/{chunks}", Plan.from_schedule(sched, topo)))
    return out


PLANS = _plans()


@pytest.mark.parametrize("name,plan", PLANS, ids=[n for n, _ in PLANS])
@pytest.mark.parametrize("blocking", [False, True], ids=["stream-waits", "host-waits"])
def test_no_deadlock_and_no_race_on_two_streams(name: str, plan: Plan, blocking: bool) -> None:
    assert _check(_record(plan, blocking)) == []


def test_a_forgotten_wait_is_a_race() -> None:
    # the checker can fail: without the waits, combines read staging buffers a transfer may still be writing
    plan = dict(PLANS)["fc:2/allreduce/1"]
    problems = _check(_record(plan, blocking=False, forget_waits=True))
    assert any("unordered" in p for p in problems), problems


def test_a_two_rank_all_reduce_sends_its_gather_phase_in_one_batch() -> None:
    # stream waits: the reduce-scatter's batch, then one batch with both directions of the gather; host waits
    # close the batch at every wait, and the gather phase goes out as a send alone, then a receive alone
    plan = dict(PLANS)["fc:2/allreduce/1"]
    for blocking, batches in ((False, 2), (True, 3)):
        for log in _record(plan, blocking):
            kinds = [
                sorted(k for k, *_ in ev[2])
                for ev in log.events
                if ev[0] == "batch" and ev[2][0][2] != _CONNECT_TAG  # the first exchange aside
            ]
            assert len(kinds) == batches, (blocking, kinds)
            if not blocking:
                assert kinds == [[SEND, RECV], [SEND, RECV]]


def _hand_plan() -> Plan:
    """Three ranks, two chunks: rank 0 sends chunk 0's old value (s1) while a reduction into chunk 0 (r) is
    still arriving, and sends chunk 0 again (s2) after r is combined. The reduction may not land before s1
    has left, nor after s2 has."""
    rows = np.array(
        [
            (1, 0, 2, 0, 0.0, 1.0),  # rank 0 sends chunk 1
            (0, 1, 0, 1, 1.0, 10.0),  # r: a reduction into rank 0's chunk 0 (staged)
            (1, 2, 0, 0, 2.0, 3.0),  # a copy into rank 0's chunk 1 (direct)
            (0, 0, 2, 0, 5.0, 15.0),  # s1: rank 0 sends chunk 0's old value
            (0, 0, 1, 0, 12.0, 20.0),  # s2: rank 0 sends chunk 0 after r
        ]
    )  # chunk, src, dst, reduce, start, end
    return Plan(
        "allreduce", 3, 2, 1, 0, (0, 1), *(rows[:, k].astype(int) for k in range(4)), rows[:, 4], rows[:, 5]
    )


@pytest.mark.parametrize("blocking", [False, True], ids=["stream-waits", "host-waits"])
def test_a_send_between_a_reduction_posted_and_applied_carries_the_old_value(blocking: bool) -> None:
    assert _check(_record(_hand_plan(), blocking)) == []


def test_a_combine_before_the_old_value_left_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    # the checker sees order as well as its absence: the executor made to combine without waiting for the
    # chunk's sends in flight runs s1 after r's combine on the GPU, in order, but against the program
    real = executor._State.wait_sends

    def skip_before_combine(self: executor._State, chunk: int) -> None:
        if any(p.buf is not None for p in self.pending.get(chunk, [])):
            return
        real(self, chunk)

    monkeypatch.setattr(executor._State, "wait_sends", skip_before_combine)
    problems = _check(_record(_hand_plan(), blocking=False))
    assert any("ordered against the program" in p for p in problems), problems


@pytest.mark.parametrize("name,plan", PLANS, ids=[n for n, _ in PLANS])
def test_every_rank_meets_each_peer_first_with_a_send_and_a_receive(name: str, plan: Plan) -> None:
    # NCCL failed to set a pair up from a lopsided first batch; a ring's own first batches are lopsided
    for rank, log in enumerate(_record(plan, blocking=False)):
        first: dict[int, set[int]] = {}
        for ev in log.events:
            if ev[0] == "batch":
                for _, peer, *_ in ev[2]:
                    first.setdefault(peer, {k for k, q, *_ in ev[2] if q == peer})
        assert all(kinds == {SEND, RECV} for kinds in first.values()), (rank, first)
