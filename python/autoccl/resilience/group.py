"""The reducer's own process group, and making a smaller one from the survivors of a failure.

`shrink_group` (PyTorch 2.10+, `ncclCommShrink` from NCCL 2.29) is used where the backend supports it:
it splits the survivors off the existing communicator without a new rendezvous, and SHRINK_ABORT first
aborts what the lost rank left hanging. Elsewhere (gloo, older NCCL or PyTorch) the group is created
anew among the survivors with `new_group(..., use_local_synchronization=True)`, which involves only
the survivors (the lost rank is still in the default group, which the reducer never uses again).

Two ways the survivors could wait forever for the lost rank, both closed here: shrinking without
SHRINK_ABORT (ncclCommShrink then waits for the collectives the lost rank left hanging), and, on NCCL,
a `new_group` that PyTorch makes with ncclCommSplit of the default communicator (it does so whenever the
default group is bound to a device): a split is collective over every rank of that communicator, the
lost one included. On NCCL the old group is aborted before the new one is made, as SHRINK_ABORT does."""

from __future__ import annotations

import contextlib
import datetime
import logging
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

log = logging.getLogger("autoccl.resilience")


@dataclass
class Group:
    pg: Any  # torch.distributed.ProcessGroup
    ranks: tuple[int, ...]  # global ranks, sorted; position = rank in the group
    backend: str
    how: str  # created, shrink_group, new_group

    @property
    def size(self) -> int:
        return len(self.ranks)

    def index(self, global_rank: int) -> int:
        return self.ranks.index(global_rank)


def _timeout(seconds: float) -> datetime.timedelta:
    return datetime.timedelta(seconds=seconds)


def create(backend: str, device: torch.device, timeout_s: float) -> Group:
    """Collective over the default group: every rank of the job calls it."""
    kw: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    pg = dist.new_group(backend=backend, timeout=_timeout(timeout_s), **kw)
    return Group(pg, tuple(range(dist.get_world_size())), backend, "created")


def shrink_supported(group: Group) -> bool:
    if not hasattr(dist, "shrink_group") or shrink_abort_flag() is None:
        return False
    try:
        dev = getattr(group.pg, "bound_device_id", None)
        backend = group.pg._get_backend(dev if dev is not None else torch.device("cpu"))
        return bool(getattr(backend, "supports_shrinking", False))
    except (RuntimeError, AttributeError):
        return False


def survivors_group(
    group: Group, survivors: tuple[int, ...], device: torch.device, timeout_s: float
) -> Group:
    """Called by the survivors only (in the same order on each)."""
    survivors = tuple(sorted(survivors))
    if survivors == group.ranks:
        return group
    abort_flag = shrink_abort_flag()
    if abort_flag is not None and shrink_supported(group):
        excluded = [group.index(r) for r in group.ranks if r not in survivors]
        pg = dist.shrink_group(excluded, group=group.pg, shrink_flags=abort_flag)
        return Group(pg, survivors, group.backend, "shrink_group")
    if group.backend == "nccl":
        abort(group)
    kw: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    with _default_group_unbound(group.backend):
        pg = dist.new_group(
            ranks=list(survivors),
            backend=group.backend,
            timeout=_timeout(timeout_s),
            use_local_synchronization=True,
            **kw,
        )
    return Group(pg, survivors, group.backend, "new_group")


def abort(group: Group) -> None:
    """End an NCCL group's hanging collectives before anything else touches the GPU: a kernel waiting on
    the lost rank spins until its communicator is aborted, and a stream made to wait on it (a work's
    wait()) holds back everything queued behind it, a new communicator's set-up included."""
    try:
        dist.distributed_c10d._abort_process_group(group.pg)
    except (RuntimeError, ValueError) as e:
        log.warning("autoccl.resilience: aborting the old group failed: %s", (str(e).splitlines() or [""])[0])


def shrink_abort_flag() -> int | None:
    """SHRINK_ABORT lives in torch.distributed.distributed_c10d (torch.distributed does not re-export
    it); SHRINK_DEFAULT (0) would wait for the lost rank's hanging collectives, so without the flag
    the survivors do not shrink."""
    flag = getattr(dist.distributed_c10d, "SHRINK_ABORT", None)
    return flag if isinstance(flag, int) and flag != 0 else None


@contextlib.contextmanager
def _default_group_unbound(backend: str) -> Iterator[None]:
    """While the default group is unbound, PyTorch makes the survivors' NCCL communicator by a
    rendezvous among the survivors instead of ncclCommSplit of the default one (which needs the lost
    rank). The binding is restored afterwards; the reducer never uses the default group again."""
    default = dist.distributed_c10d._get_default_group() if dist.is_initialized() else None
    bound = getattr(default, "bound_device_id", None)
    if backend != "nccl" or bound is None:
        yield
        return
    default.bound_device_id = None  # type: ignore[union-attr]
    try:
        yield
    finally:
        default.bound_device_id = bound  # type: ignore[union-attr]
