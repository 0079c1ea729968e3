"""The exposure estimate (engine/exposure.h) against the scenario's ground truth: in a DDP-like step the
buckets all-reduced under the next backward chunk (wait=none) are hidden and the last one, which the optimizer
waits for (wait=self), is exposed; in an FSDP-like step the gathers one layer ahead (wait=prev) and
the reduce-scatters under the next layer's backward are hidden, the first gather of the step and the last
reduce-scatter exposed. The estimate is the authority's `"ev":"exposure"` trace record."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean
from test_online import assert_same_per_seq, online_env, tasks_of

from autoccl.emu import Scenario, run
from autoccl.emu.scenario import ddp_like, fsdp_like


def _scenario(shape: str, noise: bool) -> tuple[Scenario, list[bool]]:
    """The scenario and, per group of one step, whether its call is exposed."""
    if shape == "ddp":
        buckets = (200 << 20, 200 << 20, 200 << 20, 100 << 20)
        sc = ddp_like(
            steps=200, load=0.0, noise=noise, bucket_bytes=buckets, forward_us=2000, backward_us=8000
        )
        return sc, [False, False, False, True]
    # Four layers: 9 positions need 13 distinct patterns, and the search gives 27-33 (24 runs, idle or with
    # two busy cores). Six layers' 13 positions need 18, and it gave 13-21: 1 run in 5 gave every verdict.
    layers = 4
    sc = fsdp_like(
        steps=120,
        layers=layers,
        load=0.0,
        noise=noise,
        shard_bytes=128 << 20,
        forward_us=1500,
        backward_us=3000,
    )
    per_step = 2 * layers + 1
    return sc, [g == 0 or g == per_step - 1 for g in range(per_step)]


def _estimate(
    plugin: Path, sc: Scenario, extra_args: list[str] | None = None, **env_extra: str
) -> tuple[Any, dict[str, Any]]:
    env = online_env(False, NCCL_MIN_CTAS="64", AUTOCCL_NCCL_CHANNELS="24", **env_extra)
    res = run(sc, plugin=plugin, env=env, timeout=120, extra_args=extra_args or [])
    assert_clean(res)
    (rec,) = [r for r in res.trace if r.get("ev") == "exposure"]
    return res, rec


def _truth_by_position(sc: Scenario, truth: list[bool], rec: dict[str, Any]) -> list[bool]:
    """The engine's iteration starts where it found it: the rotation of one step's groups that matches its
    positions' calls (unique in these scenarios)."""
    step = [(g.calls[0].coll, g.calls[0].nbytes) for g in sc.groups[: len(truth)]]
    seen = [(q["coll"].replace("_", ""), int(q["bytes"])) for q in rec["positions"]]
    assert len(seen) == len(step)
    shifts = [s for s in range(len(step)) if [step[(s + p) % len(step)] for p in range(len(step))] == seen]
    assert len(shifts) == 1, (step, seen)
    return [truth[(shifts[0] + p) % len(truth)] for p in range(len(truth))]


def _check_tasks(rec: dict[str, Any], want: list[bool], why: str) -> int:
    """The record's per-task verdicts (one regressor a task: its calls' mean exposure) against the majority of
    the positions each task holds; the number of tasks with a verdict."""
    known = 0
    for t in rec["tasks"]:
        members = [want[p] for p in t["positions"]]
        assert len(members) == t["calls"], why
        if t["verdict"] == "unknown":
            continue
        known += 1
        assert t["verdict"] == ("exposed" if 2 * sum(members) > len(members) else "hidden"), why
        # The slope is the members' mean exposure (they move together here), within 0.2 or three of its own
        # standard errors: a loaded run times fewer iterations, and FSDP's reduce-scatter task (mean 0.25)
        # read -0.05 +- 0.11 once beside two busy loops, a right verdict 2.7 errors off its mean.
        tol = max(0.2, 3 * float(t["se"] or 0.0))
        assert t["slope"] == pytest.approx(sum(members) / len(members), abs=tol), why
    return known


def _misattributed(res: Any) -> int:
    """Timed windows (the plugin's `time` records) other than the emulator's window of the call they name."""
    calls = {(c["rank"], c["coll"], int(c["bytes"]), int(c["call"])): c for c in res.calls}
    wrong = 0
    for r in res.trace:
        if r.get("ev") != "time":
            continue
        c = calls.get((r["rank"], r["coll"], int(r["bytes"]), int(r["call"])))
        if c is None or int(r["t0_ns"]) != int(c["start_ns"]) or abs(r["gpu_us"] - c["dur_ns"] / 1e3) > 0.01:
            wrong += 1
    return wrong


def _timed_for_the_report_on_other_ranks(res: Any) -> tuple[int, int]:
    """Windows of ranks other than the authority (rank 0) marked as the report's, and windows of theirs of
    calls the authority timed for the report alone."""

    def key(r: dict[str, Any]) -> tuple[str, int, int]:
        return (r["coll"], int(r["bytes"]), int(r["call"]))

    times = [r for r in res.trace if r.get("ev") == "time"]
    searched = {key(r) for r in times if r["rank"] == 0 and not r.get("report")}
    report_alone = {key(r) for r in times if r["rank"] == 0 and r.get("report")} - searched
    others = [r for r in times if r["rank"] != 0]
    return sum(bool(r.get("report")) for r in others), sum(key(r) in report_alone for r in others)


def _hidden_calls_fit(res: Any, sc: Scenario, truth: list[bool]) -> None:
    """The ground truth's premise: every hidden call is shorter than the computation it runs under."""
    chunk_us = min(g.compute_us for g in sc.groups[: len(truth)] if g.compute_us > 0)
    longest = max(int(c["dur_ns"]) for c in res.calls) / 1e3
    assert longest < chunk_us, (longest, chunk_us)


@pytest.mark.parametrize("shape", ["ddp", "fsdp"])
def test_exposure_matches_the_step(plugin: Path, shape: str) -> None:
    """Every verdict the estimate gives is the step's. Its slopes need distinct patterns of windows beyond the
    unknowns (`patterns`; repeats of a pattern add no equation): the search's configurations make them, and a
    run whose search timed fewer whole iterations (the host under load, samples late) says nothing rather than
    fitting its few patterns exactly. Up to 10 runs, until one gives every position's verdict; a run with few
    samples (19 on a loaded CI machine) is one of those tries, its verdicts checked like any other's."""
    sc, truth = _scenario(shape, noise=False)
    tries: list[tuple[int, int, int]] = []
    # One slope a task comes sooner than one a position (DDP: the three hidden buckets' task at 0.00 and the
    # exposed one's at 1.00 where all four positions were unknown in 25-31 samples; FSDP: each task holds one
    # exposed call of 4-5, mean exposure 0.14-0.25: hidden). The most tasks with a verdict in one run:
    tasks_known = 0
    for _ in range(10):
        res, rec = _estimate(plugin, sc)
        _hidden_calls_fit(res, sc, truth)
        want = _truth_by_position(sc, truth, rec)
        assert len(rec["tasks"]) == 2, json.dumps(rec["tasks"])
        tasks_known = max(tasks_known, _check_tasks(rec, want, json.dumps(rec["tasks"])))
        # on failure, every position's slope and error and the samples left out: what the estimate saw
        seen = {k: rec[k] for k in ("samples", "patterns", "outliers", "residual_us")} | {
            "positions": [(q["verdict"], q["slope"], q["se"], q["alias"]) for q in rec["positions"]],
            "want": want,
            "misattributed_windows": _misattributed(res),
        }
        # a string: pytest prints it whole (a dict's repr is cut to a line: it hid what a rare CI failure saw)
        why = json.dumps(seen, default=str)
        for q, exposed in zip(rec["positions"], want, strict=True):
            if q["verdict"] == "unknown":
                continue
            # hidden calls of one task in lockstep share a slope, and are called hidden when their sum is ~0
            assert q["verdict"] == ("exposed" if exposed else "hidden"), why
            assert q["slope"] == pytest.approx(1.0 if exposed else 0.0, abs=0.1), why
        unknown = sum(q["verdict"] == "unknown" for q in rec["positions"])
        if unknown == 0 and tasks_known == 2:
            return
        tries.append((int(rec["samples"]), int(rec["patterns"]), unknown))
    pytest.fail(
        f"no run of 10 gave every verdict: (samples, distinct patterns, unknown positions) per run {tries}; "
        f"at most {tasks_known} of 2 tasks with a verdict"
    )


def test_noisy_step_gives_no_wrong_verdict(plugin: Path) -> None:
    """With the model's noise (3 % per call, and per computation) the calls' own changes are small against the
    iteration's: the estimate may say nothing, but what it says holds."""
    sc, truth = _scenario("ddp", noise=True)
    _, rec = _estimate(plugin, sc)
    want = _truth_by_position(sc, truth, rec)
    for q, exposed in zip(rec["positions"], want, strict=True):
        if q["verdict"] != "unknown":
            assert q["verdict"] == ("exposed" if exposed else "hidden"), (q, exposed)
    _check_tasks(rec, want, json.dumps(rec["tasks"]))


@pytest.mark.parametrize(("clock", "processes"), [("launch", False), ("launch", True), ("kernel", False)])
def test_whole_iterations_timed_for_the_estimate(plugin: Path, clock: str, processes: bool) -> None:
    """Under the launch clock (the default on GPUs) only the searches' samples are timed: in one process
    the DDP-like step's estimate got 8-14 whole iterations and, mostly, no verdict. With
    AUTOCCL_EXPOSURE_EVERY=8 the authority times every call of the iterations the search times and of 4 in
    every 8 after it, for the estimate alone: 55 samples at least, no verdict wrong, the exposed bucket
    called exposed. The hidden buckets may stay unknown: in the noiseless emulator their windows move almost
    together (in one process, slopes of -1.0 to 1.0 with errors of 0.36-0.47 in about one run in five; the
    others call one to three of them hidden). The searches end as without it (NCCL's choice here), every
    rank applies the same configuration on every call. Under
    the kernel clock, which times every call while timing is on, the setting adds the blocks after the
    search: samples, but in the noiseless emulator no new pattern of windows (the settled calls repeat
    theirs), so no verdict is asked there."""
    sc, truth = _scenario("ddp", noise=False)
    clock_args = ["--launch-clock"] if clock == "launch" else []
    runs = {}
    for every in ("0", "8"):
        env = online_env(
            processes, NCCL_MIN_CTAS="64", AUTOCCL_NCCL_CHANNELS="24", AUTOCCL_EXPOSURE_EVERY=every
        )
        env["AUTOCCL_CLOCK"] = clock
        res = run(sc, plugin=plugin, env=env, processes=processes, timeout=300, extra_args=clock_args)
        assert_clean(res)
        assert_same_per_seq(res.calls)
        (rec,) = [r for r in res.trace if r.get("ev") == "exposure"]
        runs[every] = (res, rec)
    res, rec = runs["8"]
    plain_res, plain_rec = runs["0"]
    assert plain_rec["timed_for_it"] == 0, plain_rec
    # With the setting: 69-75 samples in one process under the launch clock, 133-142 over TCP, 60-73 under the
    # kernel clock (the search's iterations timed whole either way), idle or with three busy loops beside it.
    # Without it the count is the search's: 8-14 in one process, 37-45 over TCP, 30-33 under the kernel clock
    # on an idle machine, but 71 once on a loaded CI machine, whose search ran long; so the bound is the
    # setting's own count, not a margin over the plain run's.
    floor = {("launch", False): 55, ("launch", True): 110, ("kernel", False): 50}[(clock, processes)]
    assert rec["timed_for_it"] > 0 and rec["samples"] >= floor, (rec["samples"], plain_rec["samples"], floor)
    # the searches' outcome: NCCL's choice for both buckets' tasks, as without the setting
    pins = {k: (t["algo"], t["proto"], t["channels"]) for k, t in tasks_of(res).items()}
    plain_pins = {k: (t["algo"], t["proto"], t["channels"]) for k, t in tasks_of(plain_res).items()}
    assert pins == plain_pins, (pins, plain_pins)
    # Under the launch clock the other rank times nothing for the estimate: no window of its is the report's,
    # and none is of a call the authority timed for the report alone (decisions agree, so its timed calls are
    # the search's). How many calls it times is its search's, which varies between runs by more than a count's
    # bound could hold (on a loaded CI machine 89 without the setting and 302 with it in one run; 235-259
    # either way on an idle one). The kernel clock times every call of the process while the profiler's mask
    # is on, and in one process the authority's block turns it on for both ranks (here 295 such windows).
    reported, report_alone = _timed_for_the_report_on_other_ranks(res)
    assert reported == 0
    if clock == "launch":
        assert report_alone == 0
    want = _truth_by_position(sc, truth, rec)
    got = [(q["verdict"], q["slope"], q["se"]) for q in rec["positions"]]
    for (verdict, _, _), exposed in zip(got, want, strict=True):
        assert verdict in ("unknown", "exposed" if exposed else "hidden"), (got, want)
    if clock == "kernel":  # the blocks repeat the settled calls' windows exactly here: no new pattern
        return
    assert all(v == "exposed" for (v, _, _), e in zip(got, want, strict=True) if e), (got, want)
