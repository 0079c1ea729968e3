"""The reducer's process groups: the first one, one of the survivors of a failure, one with newcomers.

The first group is made over the job's default group (every rank calls it). Every later group is made
directly from the job's key-value store among exactly its members (`ProcessGroupGloo` /
`ProcessGroupNCCL` on a store prefix of its own), never through the default group: a lost rank is still
in the default group, and a replacement worker that joins back is not in it at all (its default group is
its own). `shrink_group` (PyTorch 2.10+, `ncclCommShrink`; the image's NCCL 2.28.9 has it) is used where the
backend supports it: it splits the survivors off the existing communicator without a new rendezvous,
and SHRINK_ABORT first aborts what the lost rank left hanging. Where it fails on any survivor, every
survivor re-creates the group (they agree through the store).

Two ways the survivors could wait forever for the lost rank, both closed here: shrinking without
SHRINK_ABORT (ncclCommShrink then waits for the collectives the lost rank left hanging), and, on NCCL, a
new communicator set up while a kernel of the old one still waits on the lost rank (the old group is
aborted first, as SHRINK_ABORT does). A group made directly is not registered with torch.distributed:
the reducer calls its collectives through `dist.all_reduce(..., group=pg)` (which takes any group) and
the backend's own send/recv (which need no registration)."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from autoccl.resilience.config import ResilienceError, first_line

log = logging.getLogger("autoccl.resilience")


@dataclass
class Group:
    pg: Any  # a torch.distributed ProcessGroup (registered) or backend (made directly); None while forming
    ranks: tuple[int, ...]  # global ranks, sorted; position = rank in the group
    backend: str
    how: str  # created, shrink_group, re-created (survivors), grown (newcomers), forming

    @property
    def size(self) -> int:
        return len(self.ranks)

    def index(self, global_rank: int) -> int:
        return self.ranks.index(global_rank)

    @property
    def registered(self) -> bool:
        """Made through torch.distributed (new_group, shrink_group) rather than directly."""
        return self.how in ("created", "shrink_group")


# How the reducer's NCCL groups are made (ProcessGroupNCCL reads these when a group is made):
# - CleanUpOnly: the watchdog aborts a failed communicator and leaves the process running. Under the
#   default (3, SkipCleanUp) a communicator whose peer died took the process down 60 s after the failure,
#   after the survivor had regrouped (one H200, two ranks as two hosts).
# - A 1 s flight-recorder wait: the watchdog sleeps 4 x this before it aborts a failed communicator (60 s
#   at the default 15 s). With CleanUpOnly the survivor regrouped in 5.3 s and then made no step until that
#   abort, 60 s after the failure; with this wait the survivor on 2 x H200 went on at its usual step time
#   right after the regroup (benchmarks/results/h200x2/resilience/).
_REDUCER_GROUP_ENV = {
    "TORCH_NCCL_ASYNC_ERROR_HANDLING": "2",
    "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC": "1000",
}
_env_lock = threading.Lock()
_told: set[str] = set()  # the job's settings overridden, said once each


@contextlib.contextmanager
def _failures_left_to_the_reducer() -> Iterator[None]:
    """The reducer's own groups are made under _REDUCER_GROUP_ENV (the reducer recovers from their
    failures); the job's other groups keep the job's settings, unless one is made on another thread
    while this runs (the environment is the process's: PyTorch offers no per-group setting)."""
    with _env_lock:
        before = {k: os.environ.get(k) for k in _REDUCER_GROUP_ENV}
        for k, v in before.items():
            if v is not None and v != _REDUCER_GROUP_ENV[k] and k not in _told:
                _told.add(k)
                log.warning(
                    "autoccl.resilience: the reducer's groups use %s=%s, not the job's %s",
                    k,
                    _REDUCER_GROUP_ENV[k],
                    v,
                )
        os.environ.update(_REDUCER_GROUP_ENV)
        try:
            yield
        finally:
            for k, v in before.items():
                if v is None:
                    del os.environ[k]
                else:
                    os.environ[k] = v


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def create(backend: str, device: torch.device, timeout_s: float) -> Group:
    """Collective over the default group: every rank of the job calls it."""
    kw: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    with _failures_left_to_the_reducer():
        pg = dist.new_group(backend=backend, timeout=_timeout(timeout_s), **kw)
    return Group(pg, tuple(range(dist.get_world_size())), backend, "created")


def direct(
    backend: str,
    store: Any,
    ranks: tuple[int, ...],
    rank: int,
    timeout_s: float,
    how: str,
    device: torch.device | None = None,
) -> Group:
    """A group of exactly `ranks`, met through `store` (a prefix no other group uses); every member
    calls it. Gloo waits up to timeout_s for all of them, then raises RuntimeError. NCCL is connected
    here on `device` (eagerly: otherwise its set-up would happen inside the first collective)."""
    ranks = tuple(sorted(ranks))
    pg: Any
    if backend == "gloo":
        pg = dist.ProcessGroupGloo(store, ranks.index(rank), len(ranks), _timeout(timeout_s))
    elif backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts.is_high_priority_stream = False
        opts._timeout = _timeout(timeout_s)
        opts.global_ranks_in_group = list(ranks)  # type: ignore[attr-defined]
        with _failures_left_to_the_reducer():
            pg = dist.ProcessGroupNCCL(store, ranks.index(rank), len(ranks), opts)
        if device is not None and device.type == "cuda" and hasattr(pg, "eager_connect_single_device"):
            pg.eager_connect_single_device(device)
    else:
        raise ValueError(f"the resilient reducer supports the gloo and nccl backends, not {backend}")
    return Group(pg, ranks, backend, how)


def shrink_supported(group: Group) -> bool:
    if not group.registered or not hasattr(dist, "shrink_group") or shrink_abort_flag() is None:
        return False
    try:
        dev = getattr(group.pg, "bound_device_id", None)
        backend = group.pg._get_backend(dev if dev is not None else torch.device("cpu"))
        return bool(getattr(backend, "supports_shrinking", False))
    except (RuntimeError, AttributeError):
        return False


def survivors_group(
    group: Group,
    survivors: tuple[int, ...],
    rank: int,
    store: Any,
    timeout_s: float,
    device: torch.device | None = None,
) -> Group:
    """Called by the survivors only (in the same order on each); `store` is the new group's own prefix."""
    survivors = tuple(sorted(survivors))
    if survivors == group.ranks and group.pg is not None:
        return group
    abort_flag = shrink_abort_flag()
    if abort_flag is not None and shrink_supported(group):
        excluded = [group.index(r) for r in group.ranks if r not in survivors]
        pg: Any = None
        try:
            with _failures_left_to_the_reducer():
                pg = dist.shrink_group(excluded, group=group.pg, shrink_flags=abort_flag)
        except RuntimeError as e:
            # NCCL 2.28.9 over its socket transport: ncclRemoteError ("Connection closed by remote peer")
            # once the lost rank's process is gone (two ranks as two hosts on one H200)
            log.warning("autoccl.resilience: shrink_group failed, re-creating the group: %s", first_line(e))
        if _every_survivor_shrank(store, survivors, rank, pg is not None, timeout_s):
            return Group(pg, survivors, group.backend, "shrink_group")
        if pg is not None:
            # Another survivor's shrink failed: this communicator has no peers. The old group is gone
            # already (shrink_group destroys it).
            abort(Group(pg, survivors, group.backend, "shrink_group"))
            return direct(group.backend, _recreated(store), survivors, rank, timeout_s, "re-created", device)
        store = _recreated(store)
    if group.backend == "nccl":
        abort(group)
    return direct(group.backend, store, survivors, rank, timeout_s, "re-created", device)


def _recreated(store: Any) -> Any:
    """The store prefix of a group re-created after a shrink that failed (apart from its shrank/ keys)."""
    return dist.PrefixStore("re-created", store)


def _every_survivor_shrank(
    store: Any, survivors: tuple[int, ...], rank: int, ok: bool, timeout_s: float
) -> bool:
    """Whether shrink_group worked on every survivor: one where it failed re-creates the group, so every
    survivor must (the same group on all of them, or each waits in a group the others never join)."""
    store.set(f"shrank/{rank}", "1" if ok else "0")
    keys = [f"shrank/{r}" for r in survivors]
    try:
        store.wait(keys, _timeout(timeout_s))
    except (RuntimeError, dist.DistStoreError) as e:
        # ncclCommShrink is collective: a survivor still inside it never says how it went
        missing = [r for r, k in zip(survivors, keys, strict=True) if not store.check([k])]
        raise ResilienceError(
            f"rank {rank}: survivors {missing} did not say within {timeout_s:.0f} s whether shrink_group "
            f"worked for them ({first_line(e)})"
        ) from e
    return all(store.get(k) == b"1" for k in keys)


def send(group: Group, tensor: torch.Tensor, to_rank: int) -> None:
    """Point to point; gloo moves host memory only, so a GPU tensor goes through a host copy there."""
    if group.backend == "gloo" and tensor.device.type != "cpu":
        tensor = tensor.cpu()
    group.pg.send([tensor.contiguous()], group.index(to_rank), 0).wait()


def recv(group: Group, tensor: torch.Tensor, from_rank: int) -> None:
    """Into `tensor` (contiguous), through a host copy where gloo receives a GPU tensor."""
    if group.backend == "gloo" and tensor.device.type != "cpu":
        host = torch.empty(tensor.shape, dtype=tensor.dtype)
        group.pg.recv([host], group.index(from_rank), 0).wait()
        tensor.copy_(host)
        return
    group.pg.recv([tensor], group.index(from_rank), 0).wait()


def abort(group: Group) -> None:
    """End an NCCL group's hanging collectives before anything else touches the GPU: a kernel waiting on
    the lost rank spins until its communicator is aborted, and a stream made to wait on it (a work's
    wait()) holds back everything queued behind it, a new communicator's set-up included."""
    if group.pg is None:
        return
    try:
        if group.registered:
            dist.distributed_c10d._abort_process_group(group.pg)
        else:
            group.pg.abort()
    except (RuntimeError, ValueError) as e:
        log.warning("autoccl.resilience: aborting the old group failed: %s", first_line(e))


def release(group: Group) -> None:
    """Close a group the reducer no longer uses (its connections end, and with them any collective a
    peer still waits in)."""
    if group.pg is not None:
        close(group.pg, group.registered)


def close(pg: Any, registered: bool) -> None:
    """Close a process group: one registered with torch.distributed is destroyed there, one made directly
    shut down (its last operations flushed first). A failure is logged, not raised."""
    try:
        if registered:
            dist.destroy_process_group(pg)
        else:
            pg.shutdown()
    except (RuntimeError, ValueError) as e:
        log.warning("autoccl.resilience: closing a group failed: %s", first_line(e))


def shrink_abort_flag() -> int | None:
    """SHRINK_ABORT lives in torch.distributed.distributed_c10d (torch.distributed does not re-export
    it); SHRINK_DEFAULT (0) would wait for the lost rank's hanging collectives, so without the flag
    the survivors do not shrink."""
    flag = getattr(dist.distributed_c10d, "SHRINK_ABORT", None)
    return flag if isinstance(flag, int) and flag != 0 else None
