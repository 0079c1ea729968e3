"""Machines the tuner was not developed on: calls that move by about +-30 % from one to the next, and
configurations whose first call after a switch is slow. On either the default online engine must end at
NCCL's choice or better, per task and on the step; where the model has a real gain it must still find it;
every rank applies the same configuration to every call.

The scenarios are the emulator's (`noise_sigma`, `switch_factor`: docs/emulator.md). The reference for
"better" and "worse" is the model's noiseless time of each configuration, not the noisy samples the search
saw."""

from __future__ import annotations

import math
import statistics
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean
from test_online import bounded, check_converged, final_calls, online_env, scenario, tasks_of

from autoccl.emu import Call, Comm, Group, Scenario, run
from autoccl.emu.model import PerfModel
from autoccl.emu.runner import default_model
from autoccl.emu.scenario import ddp_like, fsdp_like

# A log-normal of 0.15: a call moves by about +-30 % at two sigmas (+35 % / -26 %; plain NCCL between
# launches on 2 x H100 moved by up to a third).
LAUNCH_NOISE = 0.15


def final_model_ratios(res: Any) -> dict[tuple[str, str, int], float]:
    """Per task: the model's time of the configuration its last call ran against NCCL's choice's."""
    model = PerfModel.load_file(default_model()) if default_model() else PerfModel()
    final = final_calls(res)
    out = {}
    for key, r in final.items():
        n, b = r["nranks"], r["task_bytes"]
        mine = model.mean_us(r["coll"], n, b, r["algo"], r["proto"], r["used_channels"], r["chunk"], 0.0)
        nccl = model.mean_us(
            r["coll"], n, b, r["def_algo"], r["def_proto"], r["def_channels"], r["def_chunk"], 0.0
        )
        out[key] = mine / nccl
    return out


def assert_agreed(res: Any) -> None:
    """One configuration per (communicator, collective, sequence number) across all ranks."""
    seen: dict[tuple[str, str, int], set[tuple[Any, ...]]] = {}
    for r in res.calls:
        seen.setdefault((r["comm"], r["coll"], int(r["seq"])), set()).add(
            (r["algo"], r["proto"], r["channels"], r["chunk"])
        )
    bad = {k: v for k, v in seen.items() if len(v) > 1}
    assert not bad, list(bad.items())[:5]


def test_real_gains_found_when_the_first_call_after_a_switch_is_slow(plugin: Path) -> None:
    """Every call after a switch of configuration runs 1.6x its time, above the 30 % at which a candidate's
    first sample abandons it: every launch converges within 3 % of the model's best and pins nothing slower
    than NCCL's choice, and the scenario's gain (the 64 MiB all_reduce: its best configuration is 4-5 % faster
    than NCCL's choice) is still found. Not in every launch: whether a candidate's first sample is the slow
    call after its switch depends on when the host's calls and the samples meet, which the emulator leaves to
    the threads; 28 of 30 launches here kept the gain at 1.6x (30 of 30 at 1.3x), so one of three must."""
    best = []
    for _ in range(3):
        sc = replace(bounded(scenario(300, noise=False)), switch_factor=1.6)
        res = run(sc, plugin=plugin, env=online_env(False), timeout=300)
        assert_clean(res)
        assert_agreed(res)
        check_converged(res, within=0.03)
        ratios = final_model_ratios(res)
        assert all(r <= 1.01 for r in ratios.values()), ratios
        best.append(min(ratios.values()))
    assert min(best) < 0.99, best  # a gain kept (the best is 4-5 %)


def test_nothing_slower_pinned_when_switches_cost_more_than_the_gain(plugin: Path) -> None:
    """Every call after a switch runs 3x its time: exploring costs more than the 4-5 % gain repays in 300
    calls, and the regret budget ends the search at NCCL's choice. Nothing slower than NCCL's choice is
    pinned."""
    sc = replace(bounded(scenario(300, noise=False)), switch_factor=3.0)
    res = run(sc, plugin=plugin, env=online_env(False), timeout=300)
    assert_clean(res)
    assert_agreed(res)
    ratios = final_model_ratios(res)
    assert all(r <= 1.01 for r in ratios.values()), ratios
    tasks = tasks_of(res)
    assert all(t["converged_at"] is not None for t in tasks.values())
    assert tasks[("000000000001da7a", "allreduce", 64 << 20)]["regret_stop"], tasks


@pytest.mark.parametrize("seed", [9, 21])
def test_never_worse_than_nccl_when_calls_move_by_30_percent(plugin: Path, seed: int) -> None:
    """Log-normal noise of 0.15 (about +-30 % at two sigmas) on every call: whatever the search pins is no
    slower than NCCL's choice in the model (1 %), and every task's search ends."""
    sc = replace(bounded(scenario(400, seed=seed)), noise_sigma=LAUNCH_NOISE)
    res = run(sc, plugin=plugin, env=online_env(False), timeout=300)
    assert_clean(res)
    assert_agreed(res)
    ratios = final_model_ratios(res)
    assert all(r <= 1.01 for r in ratios.values()), ratios
    assert all(t["converged_at"] is not None for t in tasks_of(res).values()), tasks_of(res)


def test_a_second_launch_under_noise_keeps_what_the_first_found_or_nccls(
    plugin: Path, tmp_path: Path
) -> None:
    """Two launches of one job with one cache and other noise (another seed): the second starts from the
    first's table and ends, task by task, at NCCL's choice or better."""
    env = online_env(False, AUTOCCL_CACHE_DIR=str(tmp_path / "cache"))
    for launch, seed in enumerate((31, 32)):
        sc = replace(bounded(scenario(300, seed=seed)), noise_sigma=LAUNCH_NOISE)
        res = run(sc, plugin=plugin, env=env, timeout=300, workdir=tmp_path / f"launch{launch}")
        assert_clean(res)
        assert_agreed(res)
        ratios = final_model_ratios(res)
        assert all(r <= 1.01 for r in ratios.values()), (launch, ratios)


def _median_step_ms(res: Any, last: int = 60) -> float:
    return statistics.median(res.step_ms(0)[-last:])


@pytest.mark.parametrize("shape", ["ddp", "fsdp"])
@pytest.mark.parametrize("hostile", ["noise", "switch"])
def test_the_step_is_not_slower_on_a_hostile_machine(plugin: Path, shape: str, hostile: str) -> None:
    """As `autoccl run` starts a job (64 channels on the communicator, NCCL's choice at its plain count) under
    a heavy computation, with noise of 0.15 (about +-30 %) on every kernel and computation, or a 3x first
    call after every switch: the median step of the last 60 is not above plain NCCL's by more than 1 %. The
    computations' noise is drawn alike in both runs (same seed), so the comparison is paired."""
    sc = (ddp_like if shape == "ddp" else fsdp_like)(steps=300 if shape == "ddp" else 160, load=1.0)
    sc = replace(sc, noise_sigma=LAUNCH_NOISE) if hostile == "noise" else replace(sc, switch_factor=3.0)
    plain = run(sc, plugin=None, timeout=120)
    assert_clean(plain)
    env = online_env(False, NCCL_MIN_CTAS="64", AUTOCCL_NCCL_CHANNELS="24")
    tuned = run(sc, plugin=plugin, env=env, timeout=300)
    assert_clean(tuned)
    assert_agreed(tuned)
    # the whole run too: what exploring cost (the search's calls, a switch's slow first call) is bounded
    assert sum(tuned.step_ms(0)) <= sum(plain.step_ms(0)) * 1.01, (
        sum(tuned.step_ms(0)),
        sum(plain.step_ms(0)),
    )
    assert _median_step_ms(tuned) <= _median_step_ms(plain) * 1.01, (
        _median_step_ms(tuned),
        _median_step_ms(plain),
    )


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("noise_sigma 0", "bad noise_sigma (0 < s <= 1)"),
        ("noise_sigma 1.5", "bad noise_sigma (0 < s <= 1)"),
        ("noise_sigma x", "bad noise_sigma (0 < s <= 1)"),
        ("switch_factor 0.5", "bad switch_factor (1..1000)"),
        ("switch_factor 2000", "bad switch_factor (1..1000)"),
    ],
)
def test_bad_hostile_keys_rejected(emulator: Path, tmp_path: Path, line: str, says: str) -> None:
    sc = tmp_path / "sc.txt"
    sc.write_text(
        f"autoccl-emu-scenario 1\n{line}\ncomm name=a hash=1 ranks=0\ngroup comm=a colls=allreduce:1024\n"
    )
    p = subprocess.run([str(emulator), "--scenario", str(sc), "--ranks", "0"], capture_output=True, text=True)
    assert p.returncode == 2 and says in p.stderr, p.stderr


@pytest.mark.parametrize(
    ("field", "value"), [("noise_sigma", -0.1), ("noise_sigma", 2.0), ("switch_factor", 0.9)]
)
def test_python_scenario_refuses_bad_hostile_keys(field: str, value: float) -> None:
    sc = Scenario([Comm("a", 1, (0,))], [Group("a", (Call("allreduce", 1024),))])
    with pytest.raises(ValueError, match=field):
        replace(sc, **{field: value}).to_text()
    with pytest.raises(ValueError, match="noise_sigma needs noise on"):
        replace(sc, noise=False, noise_sigma=0.1).to_text()


def test_switch_factor_slows_exactly_the_first_call_after_a_switch(plugin: Path) -> None:
    """Noiseless: a call whose configuration differs from its task's previous call on that rank runs 1.6x the
    model's time, every other call the model's time."""
    sc = replace(bounded(scenario(120, noise=False)), switch_factor=1.6)
    res = run(sc, plugin=plugin, env=online_env(False), timeout=300)
    assert_clean(res)
    switched = steady = 0
    last: dict[tuple[int, str, str, int], tuple[Any, ...]] = {}
    for r in sorted(res.calls, key=lambda r: (int(r["grank"]), int(r["start_ns"]))):
        key = (int(r["grank"]), r["comm"], r["coll"], int(r["task_bytes"]))
        cfg = (r["algo"], r["proto"], r["used_channels"], r["chunk"])
        ratio = int(r["dur_ns"]) / (1000 * float(r["model_us"]))
        if key in last and last[key] != cfg:
            switched += 1
            assert ratio == pytest.approx(1.6, rel=2e-3), r
        else:
            steady += 1
            assert ratio == pytest.approx(1.0, rel=2e-3), r
        last[key] = cfg
    assert switched >= 20 and steady > switched, (switched, steady)


def test_noise_sigma_widens_the_spread_of_calls(plugin: Path) -> None:
    """Plain NCCL's kernel times over the model's: the log spread is the model's 0.03 by default and about
    0.15 with noise_sigma 0.15 (outliers aside: the median absolute deviation)."""

    def spread(sc: Scenario) -> float:
        res = run(sc, plugin=None, timeout=120)
        assert_clean(res)
        logs = [math.log(int(r["dur_ns"]) / (1000 * float(r["model_us"]))) for r in res.calls]
        mid = statistics.median(logs)
        return 1.4826 * statistics.median(abs(x - mid) for x in logs)

    sc = scenario(200, seed=9)
    assert spread(sc) == pytest.approx(0.03, rel=0.2)
    assert spread(replace(sc, noise_sigma=LAUNCH_NOISE)) == pytest.approx(LAUNCH_NOISE, rel=0.2)
