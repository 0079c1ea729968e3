"""The adaptive runtime on 4 gloo ranks: drift detection and re-planning on an emulated network, the
fall-back to the backend's own collective, store agreement, and the DDP communication hook."""

from __future__ import annotations

import adaptive_workers as W
import pytest

from autoccl.adaptive.launch import run_local


def _decisions(result: dict) -> list[dict]:
    """A rank's events without its own timings: what every rank must agree on."""
    return [{k: v for k, v in e.items() if k not in ("plan_us", "native_us")} for e in result["events"]]


# Serial: the probes' times are emulated sleeps, and a busy second test worker once added ~20 ms to every
# reference probe (a 4x slowdown read as 1.58x).
@pytest.mark.serial
def test_slow_link_is_detected_and_replanned(S) -> None:
    slow_at = 12  # after every pair's reference probes (3 rounds of pairs x 3 probes)
    results = run_local(W.drift_job, 4, slow_at, slow_at + 30)
    events = results[0]["events"]
    # every rank took the same decisions at the same steps (agreement through the store)
    assert all(d == _decisions(results[0]) for d in map(_decisions, results))
    assert all(r["versions"] == results[0]["versions"] for r in results)
    assert all(r["correct"] for r in results)
    drift = [e for e in events if e["kind"] == "drift" and e["pair"] == "0->1" and e["iter"] >= slow_at]
    assert drift, events
    assert drift[0]["iter"] - slow_at <= 20
    assert 2.5 < drift[0]["ratio"] < 6  # 4x slower, seen through probes
    assert drift[0]["bandwidth_gbps_after"] < drift[0]["bandwidth_gbps_before"] / 2.5
    # the link was measured afresh over three payload sizes before the re-plan
    assert drift[0]["estimate"]["sizes"] == [65536, 131072, 262144] and drift[0]["estimate"]["samples"] == 15
    # the new plan sends less over the slow link than the old plan did
    plan = results[0]["plan"]
    over_slow = sum(1 for row in plan["transfers"] if row[1] == 0 and row[2] == 1)
    per_link = [
        sum(1 for row in plan["transfers"] if (row[1], row[2]) == (a, b))
        for a in range(4)
        for b in range(4)
        if a != b
    ]
    assert over_slow < max(per_link)


@pytest.mark.serial  # emulated sleeps, as the test above
def test_a_link_whose_latency_grew_gets_its_new_latency(S) -> None:
    """Link 0->1's latency goes from 20 us to 20 ms at `slow_at`, its bandwidth unchanged, with latency
    tracked (a floor of 2 ms, far above the host's scheduling noise): the pair is flagged, and the re-fit
    gives the link half the round trip's 20 ms (a ping-pong cannot tell the directions apart) and about its
    old bandwidth (not a slower link)."""
    slow_at = 12
    results = run_local(W.drift_job, 4, slow_at, slow_at + 30, 20_000.0, 1.0, 2_000.0)
    assert all(r["correct"] for r in results)
    events = results[0]["events"]
    drift = [e for e in events if e["kind"] == "drift" and e["pair"] == "0->1" and e["iter"] >= slow_at]
    assert drift, events
    assert drift[0]["iter"] - slow_at <= 20
    assert drift[0]["latency_us_before"] == pytest.approx(20.0)
    assert 7_500 < drift[0]["latency_us_after"] < 15_000, drift[0]
    assert drift[0]["bandwidth_gbps_after"] > 0.025 / 2, drift[0]
    assert all(d == _decisions(results[0]) for d in map(_decisions, results))  # the same on every rank


def test_falls_back_to_the_faster_native_collective(S) -> None:
    results = run_local(W.fallback_job, 4)
    for r in results:
        assert r["modes"][:4] == ["plan", "native", "plan", "native"]  # evaluation alternates
        assert r["choices"] and r["choices"][0]["pick"] == "native"
        assert r["modes"][-1] == "native"


def test_ddp_comm_hook_matches_ddp(S) -> None:
    results = run_local(W.ddp_job, 4)
    assert all(r["same"] for r in results)
    assert all(r["events"] == results[0]["events"] for r in results)


def test_a_remade_adaptive_uses_its_own_plans(S) -> None:
    results = run_local(W.remade_job, 2, timeout_s=30)
    first, second = results[0]["nchunks"]
    assert second > first  # chunks=4 against chunks=1
    assert all(r["nchunks"] == [first, second] and r["correct"] for r in results)
    assert results[0]["steps"] == results[1]["steps"]


def test_adaptive_on_two_subgroups_at_once(S) -> None:
    results = run_local(W.subgroups_job, 4, timeout_s=30)
    assert all(r["correct"] for r in results)
    plans = [r["plan"] for r in results]
    assert plans[0] == plans[1] and plans[2] == plans[3]  # each group's ranks run one plan
    assert plans[0]["time_us"] < plans[2]["time_us"]  # the second group's own, on its slower links


def test_a_native_collective_that_fails_part_way_leaves_the_plan_the_callers_values(S) -> None:
    for r in run_local(W.failing_native_job, 2, timeout_s=30):
        assert r == [[3] * 8] * 4  # (2 + 4) / 2 on every call, the one that tried the native included
