"""How the executor moves bytes: point-to-point operations of torch.distributed on the job's own process
group, or the same through a link emulator (each directed link its own latency and bandwidth, for CPU
demonstrations of heterogeneous or degraded networks).

A transport issues a batch of sends and receives at once (`batch_isend_irecv`: one NCCL group, so a
rank's sends and receives of a batch run concurrently) and returns one waitable handle per operation.
Peers are plan ranks, i.e. ranks of the process group.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
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


class Transport(Protocol):
    rank: int
    size: int

    def issue(self, messages: Sequence[Message]) -> list[Handle]: ...


class TorchTransport:
    """torch.distributed point-to-point operations on a process group (NCCL on GPUs, gloo on CPUs)."""

    def __init__(self, group: Any = None) -> None:
        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError(
                "torch.distributed is not initialized: call torch.distributed.init_process_group() first"
            )
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self._global = [dist.get_global_rank(group, r) if group is not None else r for r in range(self.size)]

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
        # coalesced (NCCL): one work completes the whole batch
        handle: Handle = works[-1] if works else DONE
        return [handle] * len(ops)


@dataclass
class LinkModel:
    latency_us: float
    bandwidth_gbps: float

    def time_s(self, nbytes: int) -> float:
        return (self.latency_us + nbytes / (self.bandwidth_gbps * 1e3)) * 1e-6


class _FutureHandle:
    def __init__(self, fut: Future[None]) -> None:
        self._fut = fut

    def wait(self) -> bool:
        self._fut.result()
        return True


class EmulatedTransport:
    """Sends go through emulated links: a send of b bytes over the directed link (rank, dst) holds that
    link for latency + b / bandwidth (one message at a time per link, in issue order), then the bytes move
    over the real transport. Receives are the real transport's. `set_link` changes a link's model at
    run time (a degraded link)."""

    def __init__(self, base: TorchTransport, links: dict[tuple[int, int], LinkModel]) -> None:
        self.base = base
        self.rank = base.rank
        self.size = base.size
        self._links = dict(links)
        self._lock = threading.Lock()
        self._queues: dict[int, queue.Queue[tuple[Message, Future[None]] | None]] = {}
        self._threads: list[threading.Thread] = []

    def link(self, dst: int) -> LinkModel | None:
        with self._lock:
            return self._links.get((self.rank, dst))

    def set_link(self, src: int, dst: int, model: LinkModel) -> None:
        with self._lock:
            self._links[(src, dst)] = model

    def _worker(self, dst: int) -> None:
        q = self._queues[dst]
        while True:
            item = q.get()
            if item is None:
                return
            msg, fut = item
            try:
                model = self.link(dst)
                if model is not None:
                    time.sleep(model.time_s(msg.tensor.numel()))
                self.base.issue([msg])[0].wait()
                fut.set_result(None)
            except BaseException as e:  # handed to the waiter
                fut.set_exception(e)

    def _queue(self, dst: int) -> queue.Queue[tuple[Message, Future[None]] | None]:
        q = self._queues.get(dst)
        if q is None:
            q = self._queues[dst] = queue.Queue()
            t = threading.Thread(target=self._worker, args=(dst,), daemon=True, name=f"autoccl-link-{dst}")
            t.start()
            self._threads.append(t)
        return q

    def issue(self, messages: Sequence[Message]) -> list[Handle]:
        out: list[Handle] = []
        recvs = [m for m in messages if m.kind == RECV]
        recv_handles = iter(self.base.issue(recvs))
        for m in messages:
            if m.kind == RECV:
                out.append(next(recv_handles))
            else:
                fut: Future[None] = Future()
                self._queue(m.peer).put((m, fut))
                out.append(_FutureHandle(fut))
        return out

    def close(self) -> None:
        for q in self._queues.values():
            q.put(None)
        for t in self._threads:
            t.join(timeout=30)
        self._queues.clear()
        self._threads.clear()
