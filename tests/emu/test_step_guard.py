"""The step guard in the emulator: a configuration whose kernel is faster but which holds the stream longer
(hidden time outside its channel timestamps) is pinned by a task's search that scores kernel windows (ranks
in several processes), and makes every iteration slower; the guard's round on the iteration time puts every
task back on NCCL's choice, and so does the table the run leaves for the next start. Without that cost the
round keeps the tuned plan, and the table holds it. Every rank agrees on every call."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean
from test_online import assert_same_per_seq, online_env

from autoccl import tables
from autoccl.bench import trace as T
from autoccl.emu import Call, Comm, Group, Host, Scenario, run
from autoccl.emu.scenario import pipeline_like


def _run_guarded(
    plugin: Path, sc: Scenario, work: Path, min_task_us: int, processes: bool = True, **extra: str
) -> Any:
    """The scenario online over the TCP board, ranks in two processes (`processes`; else one process, its
    in-process board), kernel-window scoring, the guard on, traced under `work`; tasks below `min_task_us`
    keep NCCL's choice; `extra` more settings."""
    env = online_env(
        True,
        AUTOCCL_SCORE="window",
        AUTOCCL_MIN_TASK_US=str(min_task_us),
        AUTOCCL_MIN_TASK_US_TCP=str(min_task_us),
        AUTOCCL_GUARD="on",
        AUTOCCL_TRACE=str(work / "trace"),
        **extra,
    )
    res = run(
        sc, plugin=plugin, env=env, processes=processes, timeout=300, extra_args=["--verbose"], workdir=work
    )
    assert_clean(res)
    return res


def _run(plugin: Path, hidden_us: int, work: Path) -> tuple[list[dict[str, Any]], list[str]]:
    ar, lines, _ = _run_traced(plugin, hidden_us, work)
    return ar, lines


def _run_traced(
    plugin: Path,
    hidden_us: int,
    work: Path,
    hosts: dict[int, Host] | None = None,
    processes: bool = True,
    ranks: int = 2,
) -> tuple[list[dict[str, Any]], list[str], list[dict[str, Any]]]:
    """The run, its rank-0 all_reduce calls in order, the guard's INFO lines and its trace verdicts; `hosts`:
    per-rank host behaviour (Host.hidden_pct: that rank's share of the hidden time); `ranks` in the
    communicator."""
    # One iteration: an all_reduce (tuned) then an all_gather (one pair: NCCL's choice either way), 600 times.
    iteration = [Group("dp", (Call("allreduce", 2 << 20),)), Group("dp", (Call("allgather", 1 << 20),))]
    sc = Scenario(
        [Comm("dp", 0x6A7D, tuple(range(ranks)))],
        iteration * 600,
        seed=3,
        noise=False,
        hidden_ns={("ring", "ll128"): hidden_us * 1000} if hidden_us else {},
        lead=8,
        hosts=hosts or {},
    )
    res = _run_guarded(plugin, sc, work, min_task_us=0, processes=processes)
    assert_same_per_seq(res.calls)
    ar = sorted(
        (r for r in res.calls if r["grank"] == 0 and r["coll"] == "allreduce"), key=lambda r: int(r["seq"])
    )
    verdicts = T.guard_verdicts(T.read_records(T.trace_files(str(work / "trace"))))
    return ar, [ln for ln in res.stderr.splitlines() if "step guard" in ln], verdicts


def _saved_allreduce(work: Path) -> dict[str, str]:
    """The all_reduce's entry in the table the run saved for the next start."""
    saved = [
        t for p in sorted((work / "cache" / "tables").glob("*.table")) for t in tables.load_table(p).tasks
    ]
    found = [t for t in saved if t["coll"] == "allreduce" and int(t["bytes"]) == 2 << 20]
    assert len(found) == 1, saved
    return found[0]


def test_guard_drops_a_plan_that_slows_the_iteration(plugin: Path, tmp_path: Path) -> None:
    ar, lines = _run(plugin, hidden_us=40, work=tmp_path)
    assert any((r["algo"], r["proto"]) == ("ring", "ll128") for r in ar), (
        "Ring/LL128 never pinned: nothing to check"
    )
    assert any("NCCL's choices for every task" in ln for ln in lines), lines
    last = ar[-1]
    assert (last["algo"], last["proto"]) == (last["def_algo"], last["def_proto"]), last
    # The next start, table mode or online's warm start, begins from NCCL's choice, not the rejected pin.
    entry = _saved_allreduce(tmp_path)
    assert (entry["algo"], entry["proto"], entry["channels"]) == (last["def_algo"], last["def_proto"], "0"), (
        entry
    )


def test_guard_trace_records_say_what_the_round_ran(plugin: Path, tmp_path: Path) -> None:
    """The trace's guard records match the INFO lines, one per verdict, and each sample's iteration ran the
    arm the record names: the all_reduce of that iteration (placed by the iteration's first call) ran NCCL's
    own pair in an `nccl` block and the pinned ring/LL128 in a `tuned` one."""
    ar, lines, verdicts = _run_traced(plugin, hidden_us=40, work=tmp_path)
    assert verdicts and len(verdicts) == len(lines), (verdicts, lines)
    assert verdicts[0]["winner"] == "nccl" and not verdicts[0]["tuned"], verdicts[0]
    assert f"{verdicts[0]['tuned_us']:.1f} us ({verdicts[0]['tuned_samples']} samples)" in lines[0], lines[0]
    checked = 0
    for v in verdicts:
        assert len(v["samples"]) == v["tuned_samples"] + v["nccl_samples"], v
        assert v["round_begin"] < v["samples"][0]["it"] and v["samples"][-1]["it"] < v["at"], v
        for smp in v["samples"]:
            if "call" not in smp:
                continue
            # the iteration is [all_reduce k, all_gather k]; one starting at an all_gather has its
            # all_reduce next
            k = smp["call"] + (1 if smp["coll"] == "all_gather" else 0)
            if k >= len(ar):
                continue
            default = (ar[k]["algo"], ar[k]["proto"]) == (ar[k]["def_algo"], ar[k]["def_proto"])
            assert default == (smp["arm"] == "nccl"), (smp, ar[k])
            checked += 1
    assert checked >= 8, verdicts


@pytest.mark.sanitize
@pytest.mark.parametrize(
    ("processes", "ranks"), [(True, 2), (False, 2), (True, 4)], ids=["tcp", "in-process", "tcp-4-ranks"]
)
def test_guard_times_the_slowest_rank(plugin: Path, tmp_path: Path, processes: bool, ranks: int) -> None:
    """Ring/LL128 holds the stream 40 us past its kernel on the last rank alone (the emulator plays each
    rank's timeline apart, so that rank's slower iterations never reach the authority's stream, as they
    would through a real job's collectives): the authority's own iterations run faster on the tuned plan,
    the last rank's slower. The round's samples are the longest of the ranks' iteration times, so the guard
    puts NCCL's choices back; on the authority's clock alone it kept the tuned plan (each sample's
    `own_us`). Ranks in separate processes report over the TCP coordinator, ranks of one process through
    its in-process board."""
    ar, lines, verdicts = _run_traced(
        plugin,
        hidden_us=40,
        work=tmp_path,
        hosts={r: Host(hidden_pct=0) for r in range(ranks - 1)},
        processes=processes,
        ranks=ranks,
    )
    assert any((r["algo"], r["proto"]) == ("ring", "ll128") for r in ar), "Ring/LL128 never pinned"
    assert verdicts, lines
    v = verdicts[0]
    assert v["winner"] == "nccl" and not v["tuned"], v
    assert all(smp["ranks"] == ranks for smp in v["samples"]), v["samples"]
    by_arm: dict[str, list[dict[str, Any]]] = {"tuned": [], "nccl": []}
    for smp in v["samples"]:
        by_arm[smp["arm"]].append(smp)
    own = {a: statistics.median(x["own_us"] for x in by_arm[a]) for a in by_arm}
    slowest = {a: statistics.median(x["us"] for x in by_arm[a]) for a in by_arm}
    assert own["tuned"] < own["nccl"], own  # the authority alone would have kept the tuned plan
    assert slowest["tuned"] > slowest["nccl"], slowest
    # every sample is the slower rank's: the last rank in the tuned blocks, by about its 40 us hold
    assert all(x["us"] >= x["own_us"] + 30 for x in by_arm["tuned"]), by_arm["tuned"]
    last = ar[-1]
    assert (last["algo"], last["proto"]) == (last["def_algo"], last["def_proto"]), last


def test_guard_keeps_a_plan_that_speeds_the_iteration(plugin: Path, tmp_path: Path) -> None:
    ar, lines, verdicts = _run_traced(plugin, hidden_us=0, work=tmp_path)
    assert any("keeping the tuned plan" in ln for ln in lines), lines
    # the all_reduce's kernel savings, counted once per iteration, explain the faster iteration
    kept = [v for v in verdicts if v["tuned"]]
    assert kept and all(not v["unexplained"] for v in verdicts), verdicts
    assert all(0.01 * v["nccl_us"] <= v["plan_gain_us"] < v["nccl_us"] for v in kept), kept
    last = ar[-1]
    assert (last["algo"], last["proto"]) != (last["def_algo"], last["def_proto"]), last
    entry = _saved_allreduce(tmp_path)
    assert (entry["algo"], entry["proto"]) == (last["algo"], last["proto"]), entry


def test_guard_arms_once_the_steps_searched_tasks_have_converged(plugin: Path, tmp_path: Path) -> None:
    """An FSDP-shaped step on one communicator: a large all_gather, many small all_gathers and
    reduce_scatters (NCCL's choice from their first calls: their calls no longer reach the engine, so the
    iteration detector sees the two large calls alone), a large reduce_scatter. The guard arms only once both
    large tasks' pins have begun, and its first round lies ahead of that iteration: whole steps, with samples
    on both sides. Calls the detector does not see still count in the timing holds; a test of "recent" tasks
    on those counts found none and armed the guard in the first steps (2 x H200, 350m FSDP2: 2 samples, NCCL's
    choices from the give-up bound on)."""
    small = 64 << 10
    step = (
        [Group("dp", (Call("allgather", 32 << 20),))]
        + [Group("dp", (Call("allgather", small),))] * 8
        + [Group("dp", (Call("reducescatter", small),)), Group("dp", (Call("allgather", small),))] * 4
        + [Group("dp", (Call("reducescatter", 32 << 20),))]
    )
    sc = Scenario([Comm("dp", 0x5D17, (0, 1))], step * 400, seed=5, noise=False, lead=8)
    res = _run_guarded(plugin, sc, tmp_path, min_task_us=30)
    assert_same_per_seq(res.calls)
    records = T.read_records(T.trace_files(str(tmp_path / "trace")))
    verdicts = T.guard_verdicts(records)
    assert verdicts, [ln for ln in res.stderr.splitlines() if "step guard" in ln]
    first = verdicts[0]
    assert first["tuned_samples"] >= 3 and first["nccl_samples"] >= 3, first
    # the round began after both large tasks had converged (their call index is the step)
    large = [
        r for r in records if r.get("ev") == "task" and r.get("rank") == 0 and int(r["bytes"]) == 32 << 20
    ]
    assert len(large) == 2, large
    converged = max(int(t["converged_at"]) for t in large)
    steps = [smp["call"] for smp in first["samples"] if "call" in smp]
    assert steps and min(steps) >= converged, (converged, first)


def test_guard_times_whole_steps_when_an_extra_call_breaks_them(plugin: Path, tmp_path: Path) -> None:
    """A step of searched all_gathers and reduce_scatters, and now and then (1 step in 6, at random) an
    extra all_reduce, which breaks the step's structure: the detector then finds runs of calls inside the step
    before the step again. The guard counts only the step's iterations, so every sample of a round is one
    whole step. Counting the detector's own iterations gave samples of four to five steps (the iteration
    before a break, timed to the first start after it: 1653-2614 us against 403-409) and pieces of steps."""
    rnd = random.Random(11)
    ag, rs = Group("dp", (Call("allgather", 8 << 20),)), Group("dp", (Call("reducescatter", 8 << 20),))
    step = [Group("dp", (Call("allgather", 32 << 20),)), ag, ag, ag, rs, rs, rs]
    step += [Group("dp", (Call("reducescatter", 32 << 20),))]
    extra = Group("dp", (Call("allreduce", 4 << 20),))
    groups = []
    for _ in range(700):
        groups += step + ([extra] if rnd.random() < 1 / 6 else [])
    sc = Scenario([Comm("dp", 0x5D18, (0, 1))], groups, seed=5, noise=False, lead=8)
    res = _run_guarded(plugin, sc, tmp_path, min_task_us=0)
    assert_same_per_seq(res.calls)
    verdicts = T.guard_verdicts(T.read_records(T.trace_files(str(tmp_path / "trace"))))
    assert len(verdicts) >= 2, [ln for ln in res.stderr.splitlines() if "step guard" in ln]
    for v in verdicts:
        assert v["tuned_samples"] >= 3 and v["nccl_samples"] >= 3, v
        assert v["period"] == len(step), v
        # every sample is one whole step: none spans a break (the iterations around it), none is a piece
        for arm, med in (("tuned", v["tuned_us"]), ("nccl", v["nccl_us"])):
            times = [smp["us"] for smp in v["samples"] if smp["arm"] == arm]
            assert all(0.8 * med < us < 1.25 * med for us in times), (arm, med, sorted(times))


def test_breaks_run_nccls_choices_once_the_guard_put_them_back(plugin: Path, tmp_path: Path) -> None:
    """The plan that slows the iteration (ring/LL128 holding the stream 40 us longer than its kernel)
    and, in 1 step of 6 at random, an extra reduce_scatter that breaks the step's structure. Once a verdict
    put NCCL's choices back, the calls between a break and the step's return run them too (each guard segment
    carries what runs there), the extra call first among them, on every rank alike. Without that they ran the
    block of the round under way: the extra call's own pin in the tuned blocks of later rounds."""
    rnd = random.Random(4)
    iteration = [Group("dp", (Call("allreduce", 2 << 20),)), Group("dp", (Call("allgather", 1 << 20),))]
    extra = Group("dp", (Call("reducescatter", 4 << 20),))
    groups: list[Group] = []
    for _ in range(900):
        groups += iteration + ([extra] if rnd.random() < 1 / 6 else [])
    sc = Scenario(
        [Comm("dp", 0x6A7E, (0, 1))],
        groups,
        seed=3,
        noise=False,
        hidden_ns={("ring", "ll128"): 40_000},
        lead=8,
    )
    res = _run_guarded(plugin, sc, tmp_path, min_task_us=0)
    assert_same_per_seq(res.calls)
    verdicts = T.guard_verdicts(T.read_records(T.trace_files(str(tmp_path / "trace"))))
    assert verdicts and not verdicts[0]["tuned"], verdicts[:1]
    rs = [r for r in res.calls if r["grank"] == 0 and r["coll"] == "reducescatter"]
    late = sorted(rs, key=lambda r: int(r["seq"]))[len(rs) // 2 :]  # well after the first verdict
    tuned = [r["seq"] for r in late if (r["algo"], r["proto"]) != (r["def_algo"], r["def_proto"])]
    assert late and not tuned, tuned[:5]


def _pipeline_stage(hidden_us: int) -> Scenario:
    """The first of 4 stages, 8 microbatches, one layer: a 16-call step of all_reduces forward (ring/LL128
    faster in its kernel) and all_gathers backward; ring/LL128 holding the stream `hidden_us` outside its
    window."""
    return replace(
        pipeline_like(
            steps=100,
            stages=4,
            stage=0,
            microbatches=8,
            layers=1,
            forward_call=Call("allreduce", 2 << 20),
            backward_call=Call("allgather", 1 << 20),
            forward_us=20.0,
            backward_us=20.0,
            load=0.0,
            noise=False,
            seed=3,
        ),
        hidden_ns={("ring", "ll128"): hidden_us * 1000} if hidden_us else {},
        lead=8,
    )


@pytest.mark.parametrize("hidden_us", [0, 80])
def test_guard_judges_whole_steps_of_a_pipeline_stage(plugin: Path, tmp_path: Path, hidden_us: int) -> None:
    """The first of 4 pipeline stages under 1F1B (pipeline_like: 3 warm-up forwards, 5 forward-backward
    pairs, the 3 backwards, one layer): its communicator's step is 16 calls, forwards an all_reduce (tuned:
    ring/LL128 is faster in its kernel) and backwards an all_gather (NCCL's choice), in an order that repeats
    only as a whole step. The guard times whole steps (every verdict's iteration is the step's 16 calls) and
    keeps the tuned plan where it speeds the step; where ring/LL128 holds the stream 80 us outside its kernel
    window, it puts NCCL's choices back, the round's tuned blocks its cost and its regret."""
    res = _run_guarded(plugin, _pipeline_stage(hidden_us), tmp_path, min_task_us=0)
    assert_same_per_seq(res.calls)
    verdicts = T.guard_verdicts(T.read_records(T.trace_files(str(tmp_path / "trace"))))
    assert verdicts, res.stderr[-3000:]
    assert all(v["period"] == 16 for v in verdicts), verdicts
    if hidden_us:
        assert not verdicts[-1]["tuned"], verdicts
        assert verdicts[0]["cost_us"] > 0 and verdicts[0]["regret_us"] == verdicts[0]["cost_us"], verdicts[0]
    else:
        assert verdicts[-1]["tuned"], verdicts
        assert verdicts[0]["regret_us"] == 0, verdicts[0]


def test_guard_regret_reaches_the_jobs_budget(plugin: Path, tmp_path: Path) -> None:
    """With the job's budget on (AUTOCCL_JOB_REGRET_PCT, 50 %: nothing is stopped by it), the process's
    ledger holds the searches' regret and the step guard's: its `job_regret` trace record at the
    communicator's end is the tasks' `regret_us` plus the verdicts' `regret_us` (the pipeline stage where the
    tuned plan slows the step: the guard's rounds cost regret)."""
    _run_guarded(plugin, _pipeline_stage(80), tmp_path, min_task_us=0, AUTOCCL_JOB_REGRET_PCT="50")
    records = T.read_records(T.trace_files(str(tmp_path / "trace")))
    guard = sum(v["regret_us"] for v in T.guard_verdicts(records))
    tasks = sum(float(r["regret_us"]) for r in records if r.get("ev") == "task" and r.get("rank") == 0)
    job = [r for r in records if r.get("ev") == "job_regret" and r.get("rank") == 0]
    assert guard > 0 and len(job) == 1, (guard, job)
    assert job[0]["regret_us"] == pytest.approx(tasks + guard, abs=1.0), (job, tasks, guard)
