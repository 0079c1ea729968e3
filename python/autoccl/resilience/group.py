"""The reducer's own process group, and making a smaller one from the survivors of a failure.

`shrink_group` (PyTorch 2.10+, `ncclCommShrink` from NCCL 2.29) is used where the backend supports it:
it splits the survivors off the existing communicator without a new rendezvous, and SHRINK_ABORT first
aborts what the lost rank left hanging. Elsewhere (gloo, older NCCL or PyTorch) the group is created
anew among the survivors with `new_group(..., use_local_synchronization=True)`, which involves only
the survivors (the lost rank is still in the default group, which the reducer never uses again)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


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
    if not hasattr(dist, "shrink_group"):
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
    if shrink_supported(group):
        excluded = [group.index(r) for r in group.ranks if r not in survivors]
        flags = getattr(dist, "SHRINK_ABORT", 0)
        pg = dist.shrink_group(excluded, group=group.pg, shrink_flags=flags)  # type: ignore[attr-defined]
        return Group(pg, survivors, group.backend, "shrink_group")
    kw: dict[str, Any] = {"device_id": device} if device.type == "cuda" else {}
    pg = dist.new_group(
        ranks=list(survivors),
        backend=group.backend,
        timeout=_timeout(timeout_s),
        use_local_synchronization=True,
        **kw,
    )
    return Group(pg, survivors, group.backend, "new_group")
