"""Protocol arms (AUTOCCL_STEP_ARMS entries `P` and `C/P`): the step guard's round also compares the tuned
plan with every call of the iteration but its last on protocol P, on the iteration time. DDP-like steps of
eight gradient buckets near 1 MiB (NCCL's LL, the tuned plan's LL128 or Simple), ranks in separate processes
over the TCP coordinator, the emulator's noise off (the arms' comparison is then the contention's alone):
- a model where a channel of LL or LL128 slows the computation beside it six times as much as a channel of
  Simple (load.gemm_proto_<name>; the shipped model has 1 for all: no GPU measurement of it is committed): the
  guard keeps `hidden=simple`, the hidden buckets run Simple, the exposed last one keeps the tuned plan's
  protocol, and the step is faster than plain NCCL's and than the tuned plan's;
- the same buckets where every protocol loads the computation alike: the arm buys nothing, and the step is not
  slower than plain NCCL's.
Every rank applies the same configuration at every call (the arm comes from the authority's plan)."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from emu_helpers import assert_clean
from test_online import assert_same_per_seq, online_env
from test_step_arms import run_with_arms

from autoccl.emu import run
from autoccl.emu.model import PerfModel
from autoccl.emu.runner import DEFAULT_MODEL
from autoccl.emu.scenario import Scenario, ddp_like

STEPS = 600
LAST = 60
# seven hidden buckets and the exposed last; distinct sizes, so that the detector sees an iteration of 8 tasks
BUCKETS = (*((1 << 20) + 65536 * i for i in range(1, 8)), 1 << 20)


def protocol_model(path: Path, ll: float, ll128: float, simple: float) -> Path:
    """The shipped model with a GEMM that slows by channels alone (gemm_base 0, gemm_per_ch 2), each
    protocol's channel weighing as given."""
    m = PerfModel.load_file(DEFAULT_MODEL)
    m.load.update(
        {
            "gemm_base": 0.0,
            "gemm_per_ch": 2.0,
            "gemm_proto_ll": ll,
            "gemm_proto_ll128": ll128,
            "gemm_proto_simple": simple,
        }
    )
    m.save(path)
    return path


def scenario() -> Scenario:
    return ddp_like(
        steps=STEPS, load=1.0, bucket_bytes=BUCKETS, forward_us=300.0, backward_us=700.0, seed=2, noise=False
    )


def _median_step(res: Any) -> float:
    return statistics.median(res.step_ms(0)[-LAST:])


def _plain(model: Path) -> float:
    res = run(scenario(), plugin=None, model=model, processes=True, timeout=120)
    assert_clean(res)
    return _median_step(res)


def _online(model: Path, arms: str) -> Any:
    return run_with_arms(scenario(), model, arms)


def _last_steps(res: Any, grank: int) -> dict[int, set[str]]:
    """Per position of the step, the protocols its calls ran in the last LAST steps on rank `grank`."""
    calls = sorted((r for r in res.calls if int(r["grank"]) == grank), key=lambda r: int(r["seq"]))
    tail = calls[-LAST * len(BUCKETS) :]
    assert [int(r["bytes"]) for r in tail[: len(BUCKETS)]] == list(BUCKETS)
    return {p: {str(r["proto"]) for r in tail[p :: len(BUCKETS)]} for p in range(len(BUCKETS))}


def test_protocol_arm_keeps_hidden_calls_on_the_lighter_protocol(plugin: Path, tmp_path: Path) -> None:
    model = protocol_model(tmp_path / "protocols.json", ll=3.0, ll128=3.0, simple=0.5)
    plain = _plain(model)
    res = _online(model, "hidden=simple")
    lines = [ln for ln in res.stderr.splitlines() if "step guard:" in ln]
    assert lines and "keeping the tuned plan, hidden calls on simple" in lines[-1], lines
    guard = [t for t in res.trace if t.get("ev") == "guard"]
    assert guard and guard[-1]["winner"] == "hidden=simple", guard[-1:]
    us = {a["arm"]: float(a["us"]) for a in guard[-1]["arms"]}
    assert us["hidden=simple"] < us["tuned"] and us["hidden=simple"] < us["nccl"], us
    for grank in (0, 1):
        protos = _last_steps(res, grank)
        assert all(protos[p] == {"simple"} for p in range(len(BUCKETS) - 1)), protos
        # the exposed last call keeps the tuned plan's protocol (the search's pin there, not the arm's)
        assert protos[len(BUCKETS) - 1] != {"simple"}, protos
    tuned = _median_step(res)
    assert tuned < plain * 0.95, (tuned, plain)


def test_protocol_arm_buys_nothing_where_protocols_load_alike(plugin: Path, tmp_path: Path) -> None:
    model = protocol_model(tmp_path / "alike.json", ll=1.0, ll128=1.0, simple=1.0)
    plain = _plain(model)
    res = _online(model, "hidden=simple")
    guard = [t for t in res.trace if t.get("ev") == "guard"]
    assert guard, res.stderr[-3000:]
    assert guard[-1]["winner"] != "hidden=simple", guard[-1]
    assert _median_step(res) <= plain * 1.005, (_median_step(res), plain)


def _guard_rounds(model: Path, min_task_us: str, arms: str, **nccl: str) -> tuple[Any, list[dict[str, Any]]]:
    """The scenario online over TCP with step arms `arms`, tasks below `min_task_us` left to NCCL and NCCL's
    own variables `nccl` on every rank: the run (clean, every rank the same configuration at every call) and
    the authority's guard records (at least one)."""
    env = online_env(
        True,
        AUTOCCL_MIN_TASK_US=min_task_us,
        AUTOCCL_MIN_TASK_US_TCP=min_task_us,
        AUTOCCL_STEP_ARMS=arms,
        **nccl,
    )
    res = run(scenario(), plugin="default", model=model, env=env, processes=True, timeout=300)
    assert_clean(res)
    assert_same_per_seq(res.calls)
    guard = [t for t in res.trace if t.get("ev") == "guard"]
    assert guard, res.stderr[-3000:]
    return res, guard


def test_a_protocol_arm_nccl_refuses_is_not_judged(plugin: Path, tmp_path: Path) -> None:
    """`hidden=ll128` where NCCL offers no LL128 (NCCL_PROTO=^LL128 on every rank, as NCCL over sockets):
    every call it limits asks for a pair NCCL refuses and runs NCCL's choice. The round records the arm as
    having limited calls and changed none (inert), and it wins nothing, though LL128 would be the lighter
    protocol here; no call runs LL128, and every rank applies the same configuration."""
    model = protocol_model(tmp_path / "ll128-light.json", ll=3.0, ll128=0.5, simple=3.0)
    res, guard = _guard_rounds(model, "0", "hidden=ll128", NCCL_PROTO="^LL128")
    for v in guard:
        arm = next(a for a in v["arms"] if a["arm"] == "hidden=ll128")
        assert arm["inert"] and arm["changed_calls"] == 0 and arm["limited_calls"] > 0, arm
        assert v["winner"] != "hidden=ll128", v
    assert all(str(r["proto"]) != "ll128" for r in res.calls)


def test_a_protocol_arm_naming_nccls_own_choice_is_not_judged(plugin: Path, tmp_path: Path) -> None:
    """`hidden=simple` where NCCL runs ring/Simple on every call anyway (NCCL_ALGO=Ring, NCCL_PROTO=Simple)
    and the plan leaves every task to NCCL (each below the search's minimum): the arm sets ring/Simple
    explicitly, which is NCCL's own choice read from the call's cost table, so it changes no call and is
    recorded inert (as on two hosts of one H100, where NCCL's choice was ring/Simple everywhere). The cap arm
    beside it, 1 channel, changes the calls it limits and is judged. Every rank applies the same
    configuration."""
    model = protocol_model(tmp_path / "simple-light.json", ll=3.0, ll128=3.0, simple=0.5)
    res, guard = _guard_rounds(model, "1000000", "hidden=simple,1", NCCL_ALGO="Ring", NCCL_PROTO="Simple")
    for v in guard:
        arms = {a["arm"]: a for a in v["arms"]}
        simple = arms["hidden=simple"]
        assert simple["inert"] and simple["changed_calls"] == 0 and simple["limited_calls"] > 0, simple
        assert v["winner"] != "hidden=simple", v
        cap = arms["hidden=1"]
        assert not cap["inert"] and cap["changed_calls"] == cap["limited_calls"] > 0, cap
    assert {str(r["proto"]) for r in res.calls} == {"simple"}
