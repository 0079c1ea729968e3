"""The library and the CLI refuse the same AUTOCCL_* values. For each invalid value of a variable the
library reads, the real plugin in the emulator logs one WARN naming the variable and behaves as no
tuner on every rank (NCCL's choice everywhere, the job runs on: a bad setting never fails a job for the
library's own sake), and `autoccl.settings` (what `autoccl env`/`run` check) refuses it too."""

from __future__ import annotations

from pathlib import Path

import pytest
from emu_helpers import assert_default

from autoccl import settings
from autoccl.emu import run, simple

BAD = [
    ("AUTOCCL_MODE", "turbo"),
    ("AUTOCCL_MAX_CHANNELS", "0"),
    ("AUTOCCL_NCCL_CHANNELS", "65"),
    ("AUTOCCL_MANUAL_CHANNELS", "0,max"),
    ("AUTOCCL_MANUAL_CHANNELS", "4"),
    ("AUTOCCL_MANUAL_CHANNELS", "4,65"),
    ("AUTOCCL_MEASURE_CALLS", "-1"),
    ("AUTOCCL_RECHECK_MS", "1.5"),
    ("AUTOCCL_INPROC_SCORE", "fastest"),
    ("AUTOCCL_XPROC_SCORE", "all"),
    ("AUTOCCL_SCORE", "best"),
    ("AUTOCCL_CHUNK", "on"),
    ("AUTOCCL_STEP_ARMS", "on"),
    ("AUTOCCL_STEP_ARMS", "hidden=0"),
    ("AUTOCCL_STEP_ARMS", "hidden=2,2"),
    ("AUTOCCL_STEP_ARMS", "hidden=1,2,3,4,5"),
    ("AUTOCCL_STEP_ARMS", "hidden=65"),
    ("AUTOCCL_STEP_ARMS", "estimated=2;estimated=4"),
    ("AUTOCCL_STEP_ARMS", "hidden=2,estimated=2"),
    ("AUTOCCL_STEP_ARMS", "hidden=2;"),
    ("AUTOCCL_STEP_ARMS", "hidden=2/fast"),
    ("AUTOCCL_STEP_ARMS", "hidden=0/simple"),
    ("AUTOCCL_STEP_ARMS", "hidden=/simple"),
    ("AUTOCCL_STEP_ARMS", "hidden=2/ll,02/ll"),
    ("AUTOCCL_STEP_ARMS", "hidden=SIMPLE"),
    ("AUTOCCL_STEP_ARMS", "hidden=2+"),
    ("AUTOCCL_STEP_ARMS", "hidden=+"),
    ("AUTOCCL_STEP_ARMS", "hidden=2+0"),
    ("AUTOCCL_STEP_ARMS", "hidden=2+65"),
    ("AUTOCCL_STEP_ARMS", "hidden=2+MAX"),
    ("AUTOCCL_STEP_ARMS", "hidden=+max,+64"),
    ("AUTOCCL_STEP_ARMS", "hidden=2+max,02+max"),
    ("AUTOCCL_STEP_ARMS", "hidden=+max/simple"),
    ("AUTOCCL_STEP_ARMS", "estimated=+max"),
    ("AUTOCCL_STEP_ARMS", "hidden=2/+max"),
    ("AUTOCCL_FIXED", "allreduce:ring/bogus"),
    ("AUTOCCL_COORD_ADDR", "host:0"),
    ("AUTOCCL_COORD_ADDR", "::1:80"),
    ("AUTOCCL_RUN_ADDR", "no-port"),
    ("AUTOCCL_COORD_TIMEOUT_MS", "abc"),
    ("AUTOCCL_COORD_TIMEOUT_MS", "99"),
    ("AUTOCCL_COORD_LINGER_MS", "600001"),
    ("AUTOCCL_COORD_FAULTS", "drop=2"),
    ("AUTOCCL_COORD_TOKEN", "to\x01ken"),
    ("AUTOCCL_COORD_SECRET", "s" * 5000),
    ("AUTOCCL_HW", "GPU\x02x4"),
    ("AUTOCCL_TRACE", "/nonexistent/dir/trace"),
    ("AUTOCCL_TABLE", "/nonexistent/dir/t.table"),
    ("AUTOCCL_CACHE_DIR", "/nonexistent/dir/cache"),
    ("AUTOCCL_METRICS_DIR", "/nonexistent/dir"),
    ("AUTOCCL_METRICS_INTERVAL_S", "0.05"),
    ("AUTOCCL_METRICS_INTERVAL_S", "1e3"),
    ("AUTOCCL_UNPROVEN_CALLS", "65"),
    ("AUTOCCL_UNPROVEN_CALLS", "-1"),
    ("AUTOCCL_SPECULATE", "maybe"),
    ("AUTOCCL_RECORDED_START", "yes"),
    ("AUTOCCL_WAIT_REGRET", "1"),
    ("AUTOCCL_ARM_SEARCH", "yes"),
    ("AUTOCCL_SKIP_BEHIND_PCT", "10001"),
    ("AUTOCCL_SKIP_BEHIND_PCT", "2x"),
    ("AUTOCCL_PROBE_CALLS", "4"),
    ("AUTOCCL_PROBE_CALLS", "0"),
    ("AUTOCCL_STEP_CALLS", "4"),
    ("AUTOCCL_STEP_CALLS", "0"),
    ("AUTOCCL_ASK_AHEAD", "1025"),
    ("AUTOCCL_ASK_AHEAD", "Auto"),
    # the library trims ASCII spaces only: a pasted no-break space is part of the value for both
    ("AUTOCCL_SPECULATE", "off\u00a0"),
    ("AUTOCCL_GUARD", "\u2003on"),
]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v[:12]!r}" for n, v in BAD])
def test_library_and_cli_refuse_alike(plugin: Path, name: str, value: str) -> None:
    assert settings.BY_NAME[name].reader == "library"
    assert settings.problems({name: value}), f"the CLI accepts {name}={value!r}"
    res = run(simple(nranks=2, repeat=8), plugin=plugin, env={"AUTOCCL_MODE": "online", name: value})
    assert all(c == 0 for c in res.returncodes), res.stderr[-2000:]
    assert_default(res.calls)
    warns = res.warn_lines()
    assert len(warns) == 1, warns
    assert name in warns[0] and "behaving as no tuner" in warns[0], warns


def test_valid_values_are_taken(plugin: Path, tmp_path: Path) -> None:
    good = {
        "AUTOCCL_MODE": "online",
        "AUTOCCL_COORD_TIMEOUT_MS": "100",
        "AUTOCCL_COORD_LINGER_MS": "0",
        "AUTOCCL_HW": "NVIDIA H200x4",
        "AUTOCCL_TRACE": str(tmp_path / "trace"),
        "AUTOCCL_CACHE_DIR": str(tmp_path / "new-cache"),
        "AUTOCCL_ASK_AHEAD": "auto",
    }
    assert settings.problems(good) == []
    res = run(simple(nranks=2, repeat=8), plugin=plugin, env=good)
    assert all(c == 0 for c in res.returncodes), res.stderr[-2000:]
    assert res.warn_lines() == []


def test_estimated_arms_without_exposure_samples_refused_alike(plugin: Path) -> None:
    """AUTOCCL_STEP_ARMS=estimated=... caps what the exposure estimate calls hidden: with its blocks turned
    off (AUTOCCL_EXPOSURE_EVERY=0) it could never run, and both refuse the pair; unset, the library sets 8."""
    bad = {"AUTOCCL_MODE": "online", "AUTOCCL_STEP_ARMS": "estimated=2", "AUTOCCL_EXPOSURE_EVERY": "0"}
    for zero in ("0", "00", " 0"):  # what the library reads as 0
        env = {**bad, "AUTOCCL_EXPOSURE_EVERY": zero}
        assert any("AUTOCCL_STEP_ARMS" in p for p in settings.problems(env)), (zero, settings.problems(env))
    res = run(simple(nranks=2, repeat=8), plugin=plugin, env=bad)
    assert all(c == 0 for c in res.returncodes), res.stderr[-2000:]
    assert_default(res.calls)
    warns = res.warn_lines()
    assert len(warns) == 1 and "AUTOCCL_EXPOSURE_EVERY" in warns[0], warns
    for good in (
        {"AUTOCCL_STEP_ARMS": "hidden=2;estimated=4"},
        {"AUTOCCL_STEP_ARMS": "estimated=2"},
        {"AUTOCCL_STEP_ARMS": "hidden=simple,2/ll128;estimated=4/simple"},
        {"AUTOCCL_STEP_ARMS": "hidden=2+max,+16,simple+8;estimated=2/ll128+4"},
    ):
        env = {"AUTOCCL_MODE": "online", **good}
        assert settings.problems(env) == []
        res = run(simple(nranks=2, repeat=8), plugin=plugin, env=env)
        assert all(c == 0 for c in res.returncodes), res.stderr[-2000:]
        assert res.warn_lines() == []
