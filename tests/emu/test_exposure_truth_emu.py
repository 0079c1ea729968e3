"""The profiler's exposure truth (autoccl.bench.exposure_truth) end to end, on the emulator's GPU timeline:
the DDP-like and FSDP-like steps of test_exposure.py, whose exposure the scenarios declare, played with the
computation's spans written (`--compute-spans`), rank 0's timeline made a torch.profiler Chrome trace
(autoccl.emu.timeline) of the last 20 steps. The truth must give every position its declared verdict, and
compare() must find no verdict of the plugin's estimate (its `"ev":"exposure"` record, kernel clock) wrong.

The declared truth and the truth's definition (a call is exposed when no computation runs where it, or a later
call of its back-to-back chain on its stream, ends) agree at every position of both steps, so none is exempt:
- DDP: a bucket's all-reduce starts when the computation before it ends and ends under the next backward
  chunk (hidden); the last one's computation (optimizer, forward, first chunk) waits for it (`wait=self`), so
  the computation is idle at its end: exposed.
- FSDP: the step's first all-gather runs with the computation idle (it follows the previous step's last
  reduce-scatter, and layer 0's forward waits for it, `wait=prev`): exposed. Every other gather and
  reduce-scatter ends under the layer's computation it runs beside: hidden. The last reduce-scatter has no
  computation beside it: exposed. Chains (the next kernel within 20 µs) link exposed calls alone: the first
  gather to the second (2 µs apart: the second's input was ready), the last reduce-scatter to the next step's
  first gather; a chain only adds waits, so neither changes a verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_exposure import _estimate, _hidden_calls_fit, _scenario, _truth_by_position

from autoccl.bench import exposure_truth as ET
from autoccl.emu.timeline import chrome_trace

PROFILED_STEPS = 20  # the last ones: after the search, as a profile of a few steps would be taken


@pytest.mark.parametrize("noise", [False, True])
@pytest.mark.parametrize("shape", ["ddp", "fsdp"])
def test_profiler_truth_of_the_emulated_step(plugin: Path, shape: str, noise: bool) -> None:
    """With the model's noise the truth holds as well (the calls' times move, outliers up to 2.5x, and stay
    shorter than the computation beside them); the estimate then said unknown at every position (5 runs of
    each step), which (b) allows."""
    sc, declared = _scenario(shape, noise=noise)
    res, rec = _estimate(plugin, sc, extra_args=["--compute-spans"])
    _hidden_calls_fit(res, sc, declared)
    assert res.compute and all(int(s["end_ns"]) > int(s["start_ns"]) for s in res.compute)
    trace = chrome_trace(res.calls, res.compute, res.steps, grank=0, last_steps=PROFILED_STEPS)
    truth = ET.truth_of_events(trace["traceEvents"])
    assert truth.reason is None, truth.reason
    assert len(truth.iterations) == PROFILED_STEPS and not truth.other_iterations, truth.to_json()
    assert truth.kernels_without_step == 0
    # (a) The truth's positions are one step's groups in order (a step starts at its first group), with the
    # plugin's bytes, and their verdicts are the declared ones, unanimous over the profiled steps.
    step = [(g.calls[0].coll, g.calls[0].nbytes) for g in sc.groups[: len(declared)]]
    assert [(p.coll, p.bytes) for p in truth.positions] == step
    got = [(p.verdict, p.waited_share) for p in truth.positions]
    assert got == [("exposed" if e else "hidden", 1.0 if e else 0.0) for e in declared], got
    # ... and at the estimate's positions, aligned as compare() aligns them (unique in these steps)
    c = ET.compare(truth, rec)
    why = c.markdown()
    assert c.rotation is not None and not c.ambiguous and c.counts["unmatched"] == 0, why
    want = _truth_by_position(sc, declared, rec)
    assert [r.truth_verdict == "exposed" for r in c.rows] == want, why
    # (b) No verdict of the estimate is wrong; where it gave one (it may say unknown), the truth's is it.
    assert c.counts["wrong"] == 0, why
    assert all(r.agree is True for r in c.rows if r.verdict != "unknown"), why


def test_timeline_takes_one_communicator() -> None:
    """Each communicator's records are on its own clock (offset per communicator): side by side they would
    misplace the calls against each other and the computation, so a rank of two is refused, not drawn."""
    calls = [{"grank": 0, "comm": comm} for comm in ("dp", "tp")]
    with pytest.raises(ValueError, match="communicators dp, tp"):
        chrome_trace(calls, [], [], grank=0)


def test_estimate_under_the_launch_clock_against_the_truth(plugin: Path) -> None:
    """The GPU's setting: the launch clock, with whole iterations timed for the estimate
    (AUTOCCL_EXPOSURE_EVERY=8). compare() against the profiler's truth of the DDP-like step finds no verdict
    wrong and the exposed bucket right (the hidden ones may stay unknown in the noiseless emulator:
    test_exposure.py::test_whole_iterations_timed_for_the_estimate)."""
    sc, _ = _scenario("ddp", noise=False)
    res, rec = _estimate(
        plugin, sc, extra_args=["--compute-spans", "--launch-clock"], AUTOCCL_EXPOSURE_EVERY="8"
    )
    trace = chrome_trace(res.calls, res.compute, res.steps, grank=0, last_steps=PROFILED_STEPS)
    c = ET.compare(ET.truth_of_events(trace["traceEvents"]), rec)
    why = c.markdown()
    assert c.counts["wrong"] == 0 and c.counts["unmatched"] == 0, why
    assert all(r.agree is True for r in c.rows if r.truth_verdict == "exposed"), why
