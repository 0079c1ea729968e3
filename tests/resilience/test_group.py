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
    store = dist.HashStore()
    out = _in_threads(3, lambda i: G.survivors_group(old, (3, 0, 1), (0, 1, 3)[i], store, 10.0))
    assert all(new.how == "shrink_group" and new.ranks == (0, 1, 3) and new.pg == "pg" for new in out)
    assert [c["excluded"] for c in calls] == [[2]] * 3
    assert calls[0]["shrink_flags"] == dist.distributed_c10d.SHRINK_ABORT != 0


def _made_groups(monkeypatch: pytest.MonkeyPatch, seen: list[Any]) -> type:
    class Made:  # stands for ProcessGroupGloo / ProcessGroupNCCL
        class Options:
            pass

        def __init__(self, store: Any, rank: int, size: int, opts: Any) -> None:
            seen.append((rank, size))

    monkeypatch.setattr(dist, "ProcessGroupGloo", Made)
    monkeypatch.setattr(dist, "ProcessGroupNCCL", Made, raising=False)
    return Made


@pytest.mark.parametrize("failing", [(1,), (0, 1, 2)])
def test_survivors_agree_when_a_shrink_fails(
    monkeypatch: pytest.MonkeyPatch, failing: tuple[int, ...]
) -> None:
    """shrink_group raised on NCCL 2.28.9 once the lost rank's process was gone. Where it fails on one
    survivor and works on another, both must make the same group: every survivor re-creates it, and the
    communicators that one shrink made are aborted (their peers never use them); the old group is aborted
    where the shrink failed (where it worked, shrink_group destroyed it)."""
    aborted: list[Any] = []
    seen: list[Any] = []

    def shrink(excluded: list[int], group: Any, shrink_flags: int) -> str:
        import threading

        me = int(threading.current_thread().name)
        if me in failing:
            raise dist.DistBackendError("ncclRemoteError: Connection closed by remote peer")
        return f"shrunk {me}"

    monkeypatch.setattr(dist, "shrink_group", shrink, raising=False)
    monkeypatch.setattr(G, "shrink_supported", lambda group: True)
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", lambda pg: aborted.append(pg))
    made = _made_groups(monkeypatch, seen)
    old = G.Group("old", (0, 1, 2, 3), "nccl", "created")
    store = dist.HashStore()
    out = _in_threads(3, lambda i: G.survivors_group(old, (0, 1, 2), i, store, 10.0), named=True)
    assert all(new.how == "re-created" and new.ranks == (0, 1, 2) and isinstance(new.pg, made) for new in out)
    assert sorted(seen) == [(0, 3), (1, 3), (2, 3)]
    shrunk = sorted(f"shrunk {r}" for r in range(3) if r not in failing)
    assert sorted(a for a in aborted if a != "old") == shrunk
    assert aborted.count("old") == len(failing)  # a shrink that worked destroyed the old group itself


def test_a_survivor_silent_about_its_shrink_stops_the_recovery(monkeypatch: pytest.MonkeyPatch) -> None:
    """ncclCommShrink is collective: a survivor may stay inside it. The others stop with a clear error
    after the timeout instead of guessing which group it will end in."""
    from autoccl.resilience.config import ResilienceError

    monkeypatch.setattr(dist, "shrink_group", lambda *a, **kw: "shrunk", raising=False)
    monkeypatch.setattr(G, "shrink_supported", lambda group: True)
    old = G.Group("old", (0, 1, 2), "nccl", "created")
    with pytest.raises(ResilienceError, match=r"survivors \[1\] did not say"):
        G.survivors_group(old, (0, 1), 0, dist.HashStore(), 0.5)


def test_no_shrink_without_the_abort_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist.distributed_c10d, "SHRINK_ABORT", None, raising=False)
    assert G.shrink_abort_flag() is None
    assert not G.shrink_supported(G.Group("old", (0, 1), "nccl", "created"))


@pytest.mark.parametrize("backend", ["nccl", "gloo"])
def test_survivors_meet_in_a_group_of_their_own(monkeypatch: pytest.MonkeyPatch, backend: str) -> None:
    """Without shrink_group the survivors' group is made directly among them through the store, never
    through the default group (the lost rank is in it; a newcomer is not); on NCCL the old
    communicator's hanging collectives end first."""
    seen: list[Any] = []
    monkeypatch.setattr(G, "shrink_supported", lambda group: False)
    monkeypatch.setattr(dist.distributed_c10d, "_abort_process_group", lambda pg: seen.append(f"abort {pg}"))
    monkeypatch.setattr(
        dist, "new_group", lambda **kw: pytest.fail("new_group goes through the default group")
    )

    class Made:  # stands for ProcessGroupGloo / ProcessGroupNCCL
        class Options:
            pass

        def __init__(self, store: Any, rank: int, size: int, opts: Any) -> None:
            seen.append((store, rank, size))

    monkeypatch.setattr(dist, "ProcessGroupGloo", Made)
    monkeypatch.setattr(dist, "ProcessGroupNCCL", Made, raising=False)
    new = G.survivors_group(G.Group("old", (0, 1, 2), backend, "created"), (2, 0), 2, "store", 10.0)
    assert new.how == "re-created" and new.ranks == (0, 2) and isinstance(new.pg, Made)
    assert seen == (["abort old"] if backend == "nccl" else []) + [("store", 1, 2)]


def _in_threads(n: int, fn: Any, named: bool = False) -> list[Any]:
    """fn(i) in n threads at once (named "0", "1", ... with `named`)."""
    import threading

    out: list[Any] = [None] * n
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            out[i] = fn(i)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,), name=str(i) if named else None) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return out


def test_direct_group_runs_the_reducers_collectives() -> None:
    """A group made directly (not registered with torch.distributed) takes the calls the reducer makes on
    it: all_reduce and broadcast through torch.distributed, send/recv through the backend."""
    store = dist.HashStore()
    ranks = (1, 4, 6)  # global ranks: positions in the group are 0, 1, 2

    def member(i: int) -> tuple[list[float], list[float], list[float]]:
        grp = G.direct("gloo", dist.PrefixStore("e3/pg/", store), ranks, ranks[i], 20.0, "grown")
        total = torch.full((2,), float(i + 1))
        dist.all_reduce(total, group=grp.pg)
        b = torch.full((2,), float(i))
        dist.broadcast(b, group=grp.pg, group_src=grp.index(4))
        got = torch.zeros(3)
        if ranks[i] == 1:
            G.send(grp, torch.tensor([7.0, 8.0, 9.0]), to_rank=6)
        elif ranks[i] == 6:
            G.recv(grp, got, from_rank=1)
        G.release(grp)
        return total.tolist(), b.tolist(), got.tolist()

    out = _in_threads(3, member)
    assert all(o[0] == [6.0, 6.0] for o in out)
    assert all(o[1] == [1.0, 1.0] for o in out)
    assert out[2][2] == [7.0, 8.0, 9.0] and out[1][2] == [0.0, 0.0, 0.0]


def test_direct_group_gives_up_without_every_member() -> None:
    with pytest.raises(RuntimeError):
        G.direct("gloo", dist.HashStore(), (0, 1), 0, 1.0, "grown")


@pytest.mark.parametrize("job_setting", [None, "3"])
def test_reducer_groups_leave_failures_to_the_reducer(
    monkeypatch: pytest.MonkeyPatch, job_setting: str | None
) -> None:
    """Every NCCL group the reducer makes (first, shrunk, made directly) is made under
    TORCH_NCCL_ASYNC_ERROR_HANDLING=2 (under the default, ProcessGroupNCCL's watchdog took the survivor's
    process down 60 s after the lost rank's failure, after it had regrouped) and a 1 s flight-recorder
    wait. The job's settings are back afterwards."""
    import os

    monkeypatch.delenv("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", raising=False)
    if job_setting is None:
        monkeypatch.delenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", raising=False)
    else:
        monkeypatch.setenv("TORCH_NCCL_ASYNC_ERROR_HANDLING", job_setting)
    during: list[str | None] = []
    dump_waits: list[str | None] = []

    def record(*args: Any, **kwargs: Any) -> str:
        during.append(os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING"))
        dump_waits.append(os.environ.get("TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC"))
        return "pg"

    class Made:
        class Options:
            pass

        def __init__(self, *args: Any) -> None:
            record()

    monkeypatch.setattr(dist, "new_group", record)
    monkeypatch.setattr(dist, "get_world_size", lambda: 2)
    monkeypatch.setattr(dist, "shrink_group", record, raising=False)
    monkeypatch.setattr(dist, "ProcessGroupNCCL", Made, raising=False)
    monkeypatch.setattr(G, "shrink_supported", lambda group: True)
    first = G.create("nccl", torch.device("cpu"), 10.0)
    G.survivors_group(G.Group("old", (0, 1), "nccl", "created"), (0,), 0, dist.HashStore(), 10.0)
    G.direct("nccl", dist.HashStore(), (0, 1), 0, 10.0, "grown")
    assert first.how == "created" and during == ["2", "2", "2"] and dump_waits == ["1000"] * 3
    assert os.environ.get("TORCH_NCCL_ASYNC_ERROR_HANDLING") == job_setting
    assert "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC" not in os.environ


def test_a_run_ends_on_a_direct_group_without_barrier(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bench worker's last barrier on the group a resilience run ends on: dist.barrier refuses a
    group the reducer made directly on CUDA ("Expecting a ProcessGroup"), so such a group is passed an
    all_reduce instead. dist.barrier here refuses it as on CUDA."""
    from autoccl.bench.worker import end_barrier

    def barrier(group: Any = None, **kw: Any) -> None:
        if not isinstance(group, dist.ProcessGroup):
            raise ValueError(f"Expecting a ProcessGroup, but got a {type(group)}.")

    monkeypatch.setattr(dist, "barrier", barrier)
    store = dist.HashStore()

    def member(i: int) -> bool:
        grp = G.direct("gloo", store, (0, 1), i, 20.0, "re-created")
        end_barrier(grp.pg, torch.device("cpu"))
        G.release(grp)
        return True

    assert _in_threads(2, member) == [True, True]
