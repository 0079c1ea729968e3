"""How the executor moves bytes: point-to-point operations of torch.distributed on the job's own process
group, or the same through a link emulator (each directed link its own latency and bandwidth, for CPU
demonstrations of heterogeneous or degraded networks).

A transport issues a batch of sends and receives at once (`batch_isend_irecv`: one NCCL group, so a
rank's sends and receives of a batch run concurrently) and returns one waitable handle per operation.
Peers are plan ranks, i.e. ranks of the process group. A handle is waited at most once by the executor
(gloo's point-to-point works are not idempotent: a second wait waits for another message).
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.distributed as dist

SEND, RECV = 0, 1


@dataclass
class Message:
    kind: int  # SEND or RECV
    tensor: torch.Tensor  # contiguous uint8 view
    peer: int  # group rank
    tag: int


class Handle(Protocol):
    def wait(self) -> Any: ...


class _Done:
    def wait(self) -> bool:
        return True


DONE: Handle = _Done()


class _Once:
    """Wait for a work at most once: a gloo point-to-point work waited twice waits for a second message."""

    def __init__(self, work: Any) -> None:
        self._work: Any = work

    def wait(self) -> bool:
        if self._work is not None:
            self._work.wait()
            self._work = None
        return True


class Transport(Protocol):
    rank: int
    size: int

    def issue(self, messages: Sequence[Message]) -> list[Handle]: ...


_CONNECT_TAG = 1 << 23  # apart from plans' transfer indices, the profiler's tags and emulated headers
# The peers each communicator has exchanged a symmetric batch with (see connect_peers).
_CONNECTED: weakref.WeakKeyDictionary[Any, set[int]] = weakref.WeakKeyDictionary()


def connect_peers(t: Transport, peers: Iterable[int], device: torch.device) -> None:
    """Exchange one byte each way with every peer in `peers` that t's communicator has not met yet, a send
    and a receive per peer in one batch. NCCL sets a pair's connections up from the pair's first batches,
    and on 2 x H200 (NCCL 2.28.9) a lopsided first batch, a send and a receive on one rank but a receive
    alone on the other, failed in set-up ("bootstrap.cc: Message truncated : received 16384 bytes instead
    of 8192", an internal error); a plan's first batches can be lopsided (a ring's, on 4 ranks). Done for
    CUDA tensors (NCCL carries them, whatever the group's backend label says) unless the transport says
    otherwise (`symmetric_first_exchange`). Every rank of a plan calls this at the same point with the
    plan's peers, so both ranks of a pair record the pair at once."""
    want = getattr(t, "symmetric_first_exchange", None)
    if not (device.type == "cuda" if want is None else want):
        return
    done = _CONNECTED.setdefault(getattr(t, "connection_key", t), set())
    new = sorted(set(peers) - done - {t.rank})
    if not new:
        return
    msgs = []
    for p in new:
        msgs.append(Message(SEND, torch.zeros(1, dtype=torch.uint8, device=device), p, _CONNECT_TAG))
        msgs.append(Message(RECV, torch.zeros(1, dtype=torch.uint8, device=device), p, _CONNECT_TAG))
    for h in t.issue(msgs):
        h.wait()
    done.update(new)


def waits_block_host(t: Transport) -> bool:
    """Whether a wait on t's handles blocks the host until the transfer is done (gloo, emulated links), or
    only orders the caller's CUDA stream after it (NCCL). A transport that does not say is taken to block."""
    return bool(getattr(t, "waits_block_host", True))


class TorchTransport:
    """torch.distributed point-to-point operations on a process group (NCCL on GPUs, gloo on CPUs)."""

    def __init__(self, group: Any = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: call torch.distributed.init_process_group() first"
            )
        if group is not None and dist.get_rank(group) < 0:
            raise ValueError(
                f"rank {dist.get_rank()} is not a member of the process group: call the collective on the "
                "group's ranks only"
            )
        self.group = group
        nccl = dist.get_backend(group) == "nccl"
        # NCCL's work.wait() makes the current CUDA stream wait; gloo's blocks the host (a mixed
        # backend: taken to block)
        self.waits_block_host = not nccl
        # see connect_peers: on NCCL always; on a mixed or unlabelled backend, decided by the tensors' device
        self.symmetric_first_exchange: bool | None = True if nccl else None
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._global = [dist.get_global_rank(group, r) if group is not None else r for r in range(self.size)]

    @property
    def connection_key(self) -> Any:
        """What the pairs' connections belong to: the communicator, shared by every transport on the group
        (the default group as it is now: one made again is another communicator)."""
        return self.group if self.group is not None else dist.group.WORLD

    def issue(self, messages: Sequence[Message]) -> list[Handle]:
        if not messages:
            return []
        ops = [
            dist.P2POp(
                dist.isend if m.kind == SEND else dist.irecv,
                m.tensor,
                self._global[m.peer],
                self.group,
                m.tag,
            )
            for m in messages
        ]
        works = dist.batch_isend_irecv(ops)
        if len(works) == len(ops):
            return list(works)
        # coalesced (NCCL): one work completes the whole batch; it is waited once however many ops share it
        handle: Handle = _Once(works[-1]) if works else DONE
        return [handle] * len(ops)


@dataclass
class LinkModel:
    latency_us: float
    bandwidth_gbps: float

    def time_s(self, nbytes: int) -> float:
        return (self.latency_us + nbytes / (self.bandwidth_gbps * 1e3)) * 1e-6


class _Both:
    def __init__(self, first: Handle, second: Handle) -> None:
        self._handles: tuple[Handle, ...] | None = (first, second)

    def wait(self) -> bool:
        if self._handles is not None:
            for h in self._handles:
                h.wait()
            self._handles = None
        return True


class _EmulatedRecv:
    """A receive through an emulated link: complete once the payload is here and the link's modelled
    delivery time (sent ahead in an 8-byte header, on the machine-wide monotonic clock) has passed."""

    def __init__(self, header: torch.Tensor, header_handle: Handle, payload_handle: Handle) -> None:
        self._header, self._hh, self._ph = header, header_handle, payload_handle
        self._done = False

    def wait(self) -> bool:
        if not self._done:
            self._hh.wait()
            self._ph.wait()
            delay = float(self._header.view(torch.float64)[0]) - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            self._done = True
        return True


class EmulatedTransport:
    """Point-to-point transfers through emulated links. A send of b bytes over the directed link
    (rank, dst) occupies that link for latency + b / bandwidth, one message after another in issue order;
    the receiver sees the message complete when the link would have delivered it (never earlier than the
    real transfer). The real bytes move at once, under the modelled time, so the model, not the host's
    own (shared, noisy) loopback speed, decides the timing as long as the emulated links are slower.
    Links without a model are the real transport. `set_link` changes a link at run time (a degraded link).
    Ranks must share one monotonic clock: one host."""

    _HEADER_TAG = 1 << 24
    waits_block_host = True  # a receive's wait sleeps on the host until the modelled delivery

    def __init__(self, base: TorchTransport, links: dict[tuple[int, int], LinkModel]) -> None:
        self.base = base
        self.rank = base.rank
        self.size = base.size
        self._links = dict(links)
        self._free_at: dict[int, float] = {}

    @property
    def symmetric_first_exchange(self) -> bool | None:
        return self.base.symmetric_first_exchange

    @property
    def connection_key(self) -> Any:
        return self.base.connection_key

    def link(self, dst: int) -> LinkModel | None:
        return self._links.get((self.rank, dst))

    def set_link(self, src: int, dst: int, model: LinkModel) -> None:
        self._links[(src, dst)] = model

    def issue(self, messages: Sequence[Message]) -> list[Handle]:
        real: list[Message] = []
        slots: list[tuple[int, torch.Tensor | None]] = []  # per message: index of its payload in real, header
        now = time.monotonic()
        for m in messages:
            header = torch.zeros(1, dtype=torch.float64, device=m.tensor.device)
            if m.kind == SEND:
                model = self.link(m.peer)
                start = max(now, self._free_at.get(m.peer, 0.0))
                done = start + (model.time_s(m.tensor.numel()) if model is not None else 0.0)
                self._free_at[m.peer] = done
                header.fill_(done)
            real.append(Message(m.kind, header.view(torch.uint8), m.peer, m.tag + self._HEADER_TAG))
            real.append(Message(m.kind, m.tensor, m.peer, m.tag))
            slots.append((len(real) - 1, header if m.kind == RECV else None))
        handles = self.base.issue(real)
        out: list[Handle] = []
        for idx, recv_header in slots:
            if (
                recv_header is None
            ):  # a send: its header's work must live (and be waited) as long as the payload's
                out.append(_Both(handles[idx - 1], handles[idx]))
            else:
                out.append(_EmulatedRecv(recv_header, handles[idx - 1], handles[idx]))
        return out

    def close(self) -> None:
        """Nothing to release (kept for symmetry with transports that hold resources)."""
