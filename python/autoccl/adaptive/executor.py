"""Run one rank's part of a plan over point-to-point operations.

The rank walks its program (sends and receives in the plan's global issue order). Operations are issued in
batches and waited for lazily, only when their data is needed:

* before a send of chunk c, the receives into c that ended (in the schedule) before the send starts are
  applied, in order of their end: the send carries exactly the contributions the schedule says it does;
* a reducing receive lands in a staging buffer and is combined into the chunk when it is applied; a copy
  lands in place unless another operation on the chunk overlaps it in the schedule (then it is staged);
* before the chunk's memory is overwritten (a combine, a copy landing), sends of the old value that are
  still in flight are waited for.

Where a wait blocks the host (gloo, emulated links), every operation walked so far is issued before it; a
wait only ever concerns transfers that started earlier in the global order. Then a rank blocked at position
p waits for operations whose peers, blocked (if at all) at positions no earlier than the earliest blocked
one, have issued them: the execution cannot deadlock, even when one handle completes a whole batch, as
NCCL's do (the argument is in docs/adaptive.md).

On NCCL a wait only makes the current CUDA stream wait; the host goes on. A wait on an operation issued
in an earlier batch then leaves the batch being built open: the next operations join it instead of going
out alone. (Closed at every wait, the two halves of a two-rank All-Reduce's gather phase went out as two
batches, one direction after the other, on 2 x H200.) The batch is still issued before a wait on an
operation inside it, and before a combine or copy when it holds a send (its sends would otherwise wait
for the combine on the GPU). Batches stay runs of consecutive operations in the global order, so on the
GPU the earliest unfinished transfer always has both its sides' batches running: no deadlock either.

A plan's first run on an NCCL communicator starts with one symmetric exchange with each of the rank's peers
(transport.connect_peers): NCCL sets a pair up from its first batches and failed on a lopsided one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from autoccl.adaptive.plan import RECV, SEND, Op, Plan
from autoccl.adaptive.reduce_ops import Reduction
from autoccl.adaptive.transport import Handle, Message, Transport, connect_peers, waits_block_host

_INF = float("inf")


@dataclass
class _Posted:
    op: Op
    buf: torch.Tensor | None  # staging buffer (None: landed in place)
    handle: Handle | None = None


@dataclass
class _State:
    transport: Transport
    views: Sequence[torch.Tensor]
    reduction: Reduction | None
    host_blocking: bool = True  # waits_block_host(transport)
    batch: list[Message] = field(default_factory=list)
    batch_slots: list[_Posted | list[Handle | None]] = field(default_factory=list)
    pending: dict[int, list[_Posted]] = field(default_factory=dict)
    inflight: dict[int, list[list[Handle | None]]] = field(default_factory=dict)
    batches: int = 0

    def flush(self) -> None:
        if not self.batch:
            return
        handles = self.transport.issue(self.batch)
        for slot, h in zip(self.batch_slots, handles, strict=True):
            if isinstance(slot, _Posted):
                slot.handle = h
            else:
                slot[0] = h
        self.batch.clear()
        self.batch_slots.clear()
        self.batches += 1

    def wait_sends(self, chunk: int) -> None:
        sends = self.inflight.pop(chunk, None)
        if not sends:
            return
        if self.host_blocking or any(s[0] is None for s in sends):
            self.flush()  # never block with operations unissued: a peer may be waiting for one of them
        for s in sends:
            assert s[0] is not None
            s[0].wait()

    def settle(self, chunk: int, upto_us: float) -> None:
        """Apply the posted receives into `chunk` whose transfer ended at or before `upto_us`."""
        posted = self.pending.get(chunk)
        if not posted:
            return
        due = [p for p in posted if p.op.end_us <= upto_us]
        if not due:
            return
        staged = any(p.buf is not None for p in due)
        # Issue the open batch before a host wait (a peer may be waiting for one of its operations), before
        # a wait on one of its operations, and before a combine or copy when it holds a send: issued after
        # them, its sends would wait for them on the GPU instead of going out beside them. Receives alone
        # stay open, to go out with the sends that follow (in one batch both directions run at once).
        if (
            self.host_blocking
            or any(p.handle is None for p in due)
            or (staged and any(m.kind == SEND for m in self.batch))
        ):
            self.flush()
        due.sort(key=lambda p: (p.op.end_us, p.op.index))
        view = self.views[chunk]
        if staged:
            self.wait_sends(chunk)
        for p in due:
            assert p.handle is not None
            p.handle.wait()
            if p.buf is None:
                continue
            if p.op.reduce:
                assert self.reduction is not None
                self.reduction.combine(view, p.buf)
            else:
                view.copy_(p.buf)
        remaining = [p for p in posted if p.op.end_us > upto_us]
        if remaining:
            self.pending[chunk] = remaining
        else:
            del self.pending[chunk]


@dataclass
class RunStats:
    sends: int = 0
    receives: int = 0
    staged: int = 0
    batches: int = 0


def run_program(
    plan: Plan,
    rank: int,
    views: Sequence[torch.Tensor],
    transport: Transport,
    reduction: Reduction | None = None,
) -> RunStats:
    """Execute `plan` for `rank`; `views[c]` is this rank's memory for chunk c (1-D, contiguous)."""
    if len(views) != plan.nchunks:
        raise ValueError(f"{len(views)} chunk views for a plan of {plan.nchunks} chunks")
    st = _State(transport, views, reduction, waits_block_host(transport))
    stats = RunStats()
    program = plan.program(rank)
    connect_peers(transport, {op.peer for op in program}, views[0].device)
    for op in program:
        view = views[op.chunk]
        if view.numel() == 0:
            continue
        if op.kind == SEND:
            st.settle(op.chunk, op.start_us)
            slot: list[Handle | None] = [None]
            st.inflight.setdefault(op.chunk, []).append(slot)
            st.batch.append(Message(SEND, view.view(torch.uint8), op.peer, op.index))
            st.batch_slots.append(slot)
            stats.sends += 1
            continue
        assert op.kind == RECV
        if op.direct:
            st.settle(op.chunk, op.start_us)
            st.wait_sends(op.chunk)
            posted = _Posted(op, None)
            target = view
        else:
            posted = _Posted(op, torch.empty_like(view))
            target = posted.buf  # type: ignore[assignment]
            stats.staged += 1
        st.pending.setdefault(op.chunk, []).append(posted)
        st.batch.append(Message(RECV, target.view(torch.uint8), op.peer, op.index))
        st.batch_slots.append(posted)
        stats.receives += 1
    st.flush()
    for chunk in list(st.pending):
        st.settle(chunk, _INF)
    for chunk in list(st.inflight):
        st.wait_sends(chunk)
    stats.batches = st.batches
    return stats
