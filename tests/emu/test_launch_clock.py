"""The plugin's launch clock in the emulator (`autoccl-emu --launch-clock`: a simulated CUDA driver whose
events take the kernels' simulated times). The default clock on a GPU; here it runs under the same agreement
and convergence checks as the kernel clock, and the checks that it times only what the search needs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from emu_helpers import assert_clean
from test_online import assert_same_per_seq, bounded, check_converged, online_env, scenario, tasks_of

from autoccl.emu import Call, Comm, Group, Scenario, run

LAUNCH_CLOCK = ["--launch-clock"]


@pytest.mark.sanitize
@pytest.mark.parametrize("processes", [False, True])
def test_launch_clock_agrees_converges_and_times_only_samples(plugin: Path, processes: bool) -> None:
    """Threads (one process) and processes (TCP): every rank applies the same configuration on every call, the
    searches end within their bound on the model's best (or NCCL's choice for tasks below the minimum), and
    only the calls the searches sample are timed (the kernel clock timed every call of a searching task)."""
    sc = bounded(scenario(300, noise=False))
    res = run(
        sc,
        plugin=plugin,
        env=online_env(processes),
        processes=processes,
        timeout=300,
        extra_args=LAUNCH_CLOCK,
    )
    assert_clean(res)
    assert_same_per_seq(res.calls)
    check_converged(res)
    decided = [x for x in res.trace if x.get("ev") == "call" and x["rank"] == 0]
    timed = [x for x in res.trace if x.get("ev") == "time" and x["rank"] == 0]
    assert timed, "the launch clock delivered no time"
    # Every time is a launch's window from CUDA events: positive, and as long as the model's kernel at least.
    assert all(x["gpu_us"] > 0 and x["kch"] == 1 for x in timed), timed[:3]
    # (the kernel clock timed every call of a searching task; the launch clock timed 254 of 1,200 calls once,
    # on a 2-core machine that a second test run loaded too, against under 20 % otherwise)
    assert len(timed) < 0.25 * len(decided), (len(timed), len(decided))
    # Once every task has settled, no call is timed (no drift check falls inside 300 calls of a settled task).
    settled = max(int(t["converged_at"]) for t in tasks_of(res).values())
    late = [x for x in timed if int(x["call"]) > settled + 8]
    assert len(late) <= 12, late[:5]


def _observe(plugin: Path, tmp_path: Path, sc: Scenario, extra_args: list[str]) -> Counter[tuple[int, str]]:
    """Observe mode under the launch clock: the job runs clean and leaves one table holding NCCL's choice with
    its measured time; returns the timed calls per (rank, collective)."""
    env = {"AUTOCCL_MODE": "observe", "AUTOCCL_HW": "GPU Xx2", "AUTOCCL_CACHE_DIR": str(tmp_path / "cache")}
    res = run(sc, plugin=plugin, env=env, timeout=120, extra_args=extra_args)
    assert_clean(res)
    tables = list((tmp_path / "cache" / "tables").glob("*.table"))
    assert len(tables) == 1 and "nccl_us=" in tables[0].read_text()
    return Counter((x["rank"], x["coll"]) for x in res.trace if x.get("ev") == "time")


def test_launch_clock_observe_times_the_budget_only(plugin: Path, tmp_path: Path) -> None:
    """Observe mode times each task's first AUTOCCL_MEASURE_CALLS calls and no others, and writes NCCL's
    choice with its measured time into the table."""
    comms = [Comm("dp", 0x0B5E, (0, 1))]
    groups = [
        Group("dp", (Call("allreduce", 8 << 20),), repeat=60),
        Group("dp", (Call("allgather", 4 << 20),), repeat=60),
    ]
    per_task = _observe(plugin, tmp_path, Scenario(comms, groups, seed=3), LAUNCH_CLOCK)
    assert per_task and all(n <= 16 + 1 for n in per_task.values()), (
        per_task
    )  # the budget, +1 for the next call


def test_launch_clock_times_reach_a_job_that_ends_first(plugin: Path, tmp_path: Path) -> None:
    """A job whose host ends before its GPU has finished (kernels complete 50 ms after the emulator ran them;
    the run takes a few): the communicators' finalize waits for the launches already read out to reach them,
    so observe mode still has its samples and its table its times. Without that wait none arrived (a short
    job under CI load lost them all: the reading thread had not run yet)."""
    comms = [Comm("dp", 0x0B5F, (0, 1))]
    groups = [Group("dp", (Call("allreduce", 8 << 20),), repeat=20)]
    lag = [*LAUNCH_CLOCK, "--kernel-lag-us", "50000"]
    per_task = _observe(plugin, tmp_path, Scenario(comms, groups, seed=3), lag)
    assert set(per_task) == {(0, "allreduce"), (1, "allreduce")}, per_task
    assert all(16 <= n <= 16 + 1 for n in per_task.values()), per_task  # the budget, +1 for the next call


@pytest.mark.sanitize
def test_launch_clock_leaves_captured_launches_untimed(plugin: Path) -> None:
    """A group captured into a CUDA graph is decided at capture and never timed (its events would time
    nothing); its replays carry no event. The ranks still agree."""
    comms = [Comm("dp", 0x6A9F, (0, 1, 2, 3))]
    groups = [
        Group("dp", (Call("allreduce", 64 << 20),), repeat=40),
        Group("dp", (Call("allgather", 32 << 20),), repeat=20, graph=1),
    ]
    res = run(
        Scenario(comms, groups, seed=7),
        plugin=plugin,
        env=online_env(False),
        timeout=240,
        extra_args=LAUNCH_CLOCK,
    )
    assert_clean(res)
    assert_same_per_seq(res.calls)
    assert not [x for x in res.trace if x.get("ev") == "time" and x["coll"] == "allgather"]
    assert [x for x in res.trace if x.get("ev") == "time" and x["coll"] == "allreduce"]
