"""Table mode under the step guard: a start from a cached table is judged on the step, as a warm start is.

The first job searches online with the guard off, scoring kernel windows (ranks in two processes over TCP): it
pins Ring/LL128 for the step's all_reduce, and the table it leaves holds that pin. Where Ring/LL128 holds the
stream past its kernel (hidden time outside its channel timestamps) every iteration is slower on it; the
second job starts in table mode from that table:
- with the guard (the default) its round on the iteration time puts NCCL's choice back, and the job's last
  iterations run at NCCL's speed;
- with AUTOCCL_GUARD=off the table's pin runs to the end, and those iterations are slower (the control);
- where Ring/LL128 costs nothing hidden the round keeps the table.
Every rank applies the table's entry from the task's first call (not NCCL's choice until the authority has
seen the task), and one configuration per call on every rank."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from emu_helpers import assert_clean
from test_online import assert_same_per_seq, online_env

from autoccl import tables
from autoccl.bench import trace as T
from autoccl.emu import Call, Comm, Group, Scenario, run

ITERATIONS = 500
LAST = 100  # iterations compared: the job's end, past the guard's first round


def _scenario(hidden_us: int) -> Scenario:
    # One iteration: an all_reduce (tuned) then an all_gather (one pair: NCCL's choice either way).
    iteration = [Group("dp", (Call("allreduce", 2 << 20),)), Group("dp", (Call("allgather", 1 << 20),))]
    return Scenario(
        [Comm("dp", 0x7AB1, (0, 1))],
        iteration * ITERATIONS,
        seed=3,
        noise=False,
        hidden_ns={("ring", "ll128"): hidden_us * 1000} if hidden_us else {},
        lead=8,
    )


def _job(plugin: Path, work: Path, hidden_us: int, **settings: str) -> Any:
    env = online_env(
        True,
        AUTOCCL_SCORE="window",
        AUTOCCL_MIN_TASK_US="0",
        AUTOCCL_MIN_TASK_US_TCP="0",
        AUTOCCL_TRACE=str(work / "trace"),
        **settings,
    )
    res = run(
        _scenario(hidden_us),
        plugin=plugin,
        env=env,
        processes=True,
        timeout=300,
        extra_args=["--verbose"],
        workdir=work,
    )
    assert_clean(res)
    assert_same_per_seq(res.calls)
    return res


def _all_reduces(res: Any, rank: int = 0) -> list[dict[str, Any]]:
    return sorted(
        (r for r in res.calls if r["grank"] == rank and r["coll"] == "allreduce"), key=lambda r: int(r["seq"])
    )


def _last_iterations_us(res: Any) -> float:
    """Rank 0's mean iteration over the job's last LAST iterations: all_reduce start to all_reduce start."""
    starts = [int(r["start_ns"]) for r in _all_reduces(res)]
    return (starts[-1] - starts[-1 - LAST]) / LAST / 1e3


def _is_nccl(r: dict[str, Any]) -> bool:
    return (r["algo"], r["proto"]) == (r["def_algo"], r["def_proto"])


def _cached_table_job(plugin: Path, tmp_path: Path, hidden_us: int) -> Path:
    """The first job (online, guard off): the cache it leaves, whose all_reduce entry is Ring/LL128."""
    first = tmp_path / "first"
    _job(plugin, first, hidden_us, AUTOCCL_GUARD="off")
    saved = [
        t for p in sorted((first / "cache" / "tables").glob("*.table")) for t in tables.load_table(p).tasks
    ]
    entry = [t for t in saved if t["coll"] == "allreduce" and int(t["bytes"]) == 2 << 20]
    assert len(entry) == 1 and (entry[0]["algo"], entry[0]["proto"]) == ("ring", "ll128"), saved
    return first / "cache"


def _table_job(plugin: Path, tmp_path: Path, cache: Path, name: str, hidden_us: int, **settings: str) -> Any:
    work = tmp_path / name
    shutil.copytree(cache, work / "cache")
    return _job(plugin, work, hidden_us, AUTOCCL_MODE="table", **settings)


def _search_samples(res: Any) -> int:
    """Samples the authority's tasks took for a search (none: every entry is pinned untimed)."""
    tasks = [t for t in res.trace if t.get("ev") == "task" and t["rank"] == 0]
    assert tasks
    return sum(int(t["search_samples"]) for t in tasks)


def _guard_lines(res: Any) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if "step guard" in ln]


def test_table_mode_guard_puts_nccl_back_where_the_table_slows_the_step(plugin: Path, tmp_path: Path) -> None:
    cache = _cached_table_job(plugin, tmp_path, hidden_us=40)
    guarded = _table_job(plugin, tmp_path, cache, "guarded", hidden_us=40)
    unguarded = _table_job(plugin, tmp_path, cache, "unguarded", hidden_us=40, AUTOCCL_GUARD="off")

    lines = _guard_lines(guarded)
    assert any("NCCL's choices for every task" in ln for ln in lines), lines
    for rank in (0, 1):
        ar = _all_reduces(guarded, rank)
        # the table from the first call on every rank, NCCL's choice at the end
        assert (ar[0]["algo"], ar[0]["proto"]) == ("ring", "ll128"), ar[0]
        assert all(_is_nccl(r) for r in ar[-LAST:]), [r for r in ar[-LAST:] if not _is_nccl(r)][:3]
    assert _search_samples(guarded) == 0  # the table is trusted per task, judged on the step alone
    assert all((r["algo"], r["proto"]) == ("ring", "ll128") for r in _all_reduces(unguarded)), (
        "control changed"
    )
    assert not _guard_lines(unguarded)

    fast, slow = _last_iterations_us(guarded), _last_iterations_us(unguarded)
    assert fast < 0.95 * slow, (fast, slow)


def test_table_mode_guard_keeps_a_table_that_speeds_the_step(plugin: Path, tmp_path: Path) -> None:
    cache = _cached_table_job(plugin, tmp_path, hidden_us=0)
    guarded = _table_job(plugin, tmp_path, cache, "guarded", hidden_us=0)
    lines = _guard_lines(guarded)
    assert any("keeping the tuned plan" in ln for ln in lines), lines
    ar = _all_reduces(guarded)
    assert all((r["algo"], r["proto"]) == ("ring", "ll128") for r in ar[-LAST:]), ar[-1]
    # the table's entries are trusted, not timed for a search: the verdict has no kernel savings to check the
    # faster step against, and says so (plan_gain_us -1) rather than a number
    verdicts = T.guard_verdicts(T.read_records(T.trace_files(str(tmp_path / "guarded" / "trace"))))
    assert verdicts and all(v["tuned"] and v["plan_gain_us"] == -1 for v in verdicts), verdicts
    assert _search_samples(guarded) == 0
