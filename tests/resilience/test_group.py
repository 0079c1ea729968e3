"""How the survivors' group is made: never in a way that waits for the lost rank."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

from autoccl.resilience import group as G  # noqa: E402


class _Default:
    """Stands for PyTorch's default process group: only its device binding matters here."""

    def __init__(self, bound: Any) -> None:
        self.bound_device_id = bound


def test_shrink_aborts_what_the_lost_rank_left_hanging(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(
        dist,
        "shrink_group",
        lambda excluded, group, shrink_flags: calls.append(locals()) or "pg",
        raising=False,
    )
    monkeypatch.setattr(G, "shrink_supported", lambda group: True)
    old = G.Group("old", (0, 1, 2, 3), "nccl", "created")
    new = G.survivors_group(old, (3, 0, 1), torch.device("cpu"), 10.0)
    assert new.how == "shrink_group" and new.ranks == (0, 1, 3)
    assert calls[0]["excluded"] == [2]
    assert calls[0]["shrink_flags"] == dist.distributed_c10d.SHRINK_ABORT != 0


def test_no_shrink_without_the_abort_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist.distributed_c10d, "SHRINK_ABORT", None, raising=False)
    assert G.shrink_abort_flag() is None
    assert not G.shrink_supported(G.Group("old", (0, 1), "nccl", "created"))


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_new_group_is_not_split_from_the_default_communicator(
    monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    """PyTorch splits a new NCCL group from the default communicator when the default group is bound
    to a device, and a split needs every rank, the lost one too: the binding must be off for the call."""
    default = _Default(torch.device("cuda", 0))
    seen: list[Any] = []
    monkeypatch.setattr(G, "shrink_supported", lambda group: False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: default)
    monkeypatch.setattr(dist, "new_group", lambda **kw: seen.append(default.bound_device_id) or "pg")
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", lambda pg: seen.append(f"abort {pg}"))
    new = G.survivors_group(G.Group("old", (0, 1, 2), backend, "created"), (0, 2), torch.device("cpu"), 10.0)
    assert new.how == "new_group" and new.ranks == (0, 2)
    # NCCL: the old communicator's hanging collectives end before the new one is set up
    assert seen == (["abort old", None] if backend == "nccl" else [torch.device("cuda", 0)])
    assert default.bound_device_id == torch.device("cuda", 0), "the binding is restored"


def test_binding_restored_when_new_group_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    default = _Default(torch.device("cuda", 1))
    monkeypatch.setattr(G, "shrink_supported", lambda group: False)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist.distributed_c10d, "_get_default_group", lambda: default)

    def fails(**_: Any) -> None:
        raise RuntimeError("rendezvous timed out")

    monkeypatch.setattr(dist, "new_group", fails)
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", lambda pg: None)
    with pytest.raises(RuntimeError, match="rendezvous"):
        G.survivors_group(G.Group("old", (0, 1), "nccl", "created"), (1,), torch.device("cpu"), 1.0)
    assert default.bound_device_id == torch.device("cuda", 1)
