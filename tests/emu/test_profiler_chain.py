"""Profiler chaining (AUTOCCL_PROFILER_CHAIN) in the emulator: autoccl's profiler forwards every event it is
given to a second profiler plugin (a counting one, exporting v7, v6 or v5), with that plugin's own handles,
and keeps tuning as without it, whichever interface version NCCL (the emulator) drives autoccl through."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean

from autoccl._paths import ArtefactNotFound
from autoccl.emu import run, simple
from autoccl.emu.runner import counting_profiler_path

COLL, KERNEL_CH, GROUP, KERNEL_LAUNCH, KERNEL_PHASE = 1, 6, 0, 11, 15  # event type bit indices
ALL_V6, ALL_V5 = (1 << 15) - 1, (1 << 12) - 1
TYPES = {5: 12, 6: 15, 7: 16}  # event types each profiler version knows


def counting(version: int) -> Path:
    try:
        return counting_profiler_path(version)
    except ArtefactNotFound as e:
        pytest.skip(f"counting profiler not built: {e}")


def chained_counts(res: Any) -> dict[str, Any]:
    """autoccl's own counts (process totals): the last profiler_chain trace line of the one process."""
    lines = [t for t in res.trace if t.get("ev") == "profiler_chain"]
    assert lines, "autoccl wrote no profiler_chain line"
    return lines[-1]


def their_counts(out: Path) -> dict[str, Any]:
    files = list(out.glob("counts.*.json"))
    assert len(files) == 1, files
    counts: dict[str, Any] = json.loads(files[0].read_text())
    return counts


def run_chained(
    tmp_path: Path, plugin: Path, chained: Path, *, mask: int | None = None, **kw: Any
) -> tuple[Any, Path]:
    out = tmp_path / "counts"
    out.mkdir()
    env = {
        "AUTOCCL_MODE": "online",
        "AUTOCCL_HW": "GPU Xx4",
        "AUTOCCL_CACHE_DIR": str(tmp_path / "cache"),
        "AUTOCCL_PROFILER_CHAIN": str(chained),
        "EMU_COUNTING_PROFILER_OUT": str(out),
    }
    if mask is not None:
        env["EMU_COUNTING_PROFILER_MASK"] = str(mask)
    sc = simple({"allreduce": [1 << 20, 32 << 20], "allgather": [4 << 20]}, nranks=4, repeat=40)
    return run(sc, plugin=plugin, env=env, timeout=180, **kw), out


@pytest.mark.sanitize
@pytest.mark.parametrize(
    ("chained_version", "nccl_version", "clock"),
    [
        (6, "6", "kernel"),
        (5, "6", "kernel"),
        (6, "5", "launch"),
        (5, "5", "launch"),
        (7, "7", "kernel"),
        (7, "6", "launch"),  # an older NCCL's descriptor handed on as a v7 one: the v7 members zero
        (6, "7", "kernel"),
        (5, "7", "launch"),
        (7, "5", "kernel"),
    ],
)
def test_every_event_reaches_the_chained_profiler(
    plugin: Path, tmp_path: Path, chained_version: int, nccl_version: str, clock: str
) -> None:
    """The chained plugin asks for every event type: each start, stop and state record autoccl's profiler
    was given reaches it, KernelCh parents are its own Coll handles, and autoccl still times calls."""
    extra = ["--launch-clock"] if clock == "launch" else []
    res, out = run_chained(
        tmp_path,
        plugin,
        counting(chained_version),
        profiler_version=nccl_version,
        extra_args=extra,
    )
    assert_clean(res)
    ours = chained_counts(res)
    theirs = their_counts(out)
    n = TYPES[chained_version]
    for key in ("starts", "stops", "states"):
        assert ours[key][n:] == [0] * (len(ours[key]) - n), ours
        assert ours[f"forwarded_{key}"][:n] == ours[key][:n], (key, ours)
        assert theirs[key] == ours[f"forwarded_{key}"][:n], (key, theirs, ours)
    assert ours["stale"] == 0 and ours["table_full"] == 0, ours
    assert theirs["inits"] == theirs["finalizes"] == 4, theirs
    assert theirs["starts"][COLL] == len(res.calls), (theirs, len(res.calls))
    assert theirs["kernelch_parent_bad"] == 0 and theirs["coll_group_bad"] == 0, theirs
    # As NCCL does (plugin/profiler.cc, 2.28-2.30): each kernel plan is a Group event whose handle its Colls
    # name as parentGroup, and a KernelCh event names its Coll's handle, stopped ("enqueued") or not, under
    # either clock of autoccl's.
    assert theirs["starts"][KERNEL_CH] > 0 and theirs["kernelch_parent_ok"] == theirs["starts"][KERNEL_CH]
    assert theirs["states"][KERNEL_CH] == theirs["starts"][KERNEL_CH], theirs
    assert theirs["starts"][GROUP] > 0 and theirs["coll_group_ok"] == theirs["starts"][COLL], theirs
    if clock == "launch":
        assert theirs["starts"][KERNEL_LAUNCH] > 0, theirs
    assert any(t.get("ev") == "time" for t in res.trace), "autoccl timed nothing while chaining"
    if chained_version == 7:  # the emulator's v7 Colls name a kernel variant; an older NCCL's cannot
        assert theirs["coll_tagged"] == 0, theirs
        expected = theirs["starts"][COLL] if nccl_version == "7" else 0
        assert theirs["coll_variant"] == expected, theirs
        # kernel phases (a v7 NCCL's alone: one per KernelCh the emulator delivers), under their KernelCh
        if nccl_version == "7" and clock == "kernel":
            assert theirs["starts"][KERNEL_PHASE] == theirs["starts"][KERNEL_CH] > 0, theirs
            phases = theirs["starts"][KERNEL_PHASE]
            assert theirs["states"][KERNEL_PHASE] == theirs["stops"][KERNEL_PHASE] == phases, theirs
            assert theirs["phase_parent_ok"] == theirs["starts"][KERNEL_PHASE], theirs
        if nccl_version != "7":
            assert theirs["starts"][KERNEL_PHASE] == 0, theirs
    assert theirs["unknown"] == 0, theirs


@pytest.mark.sanitize
def test_events_only_the_chained_profiler_asked_for_stay_out_of_autoccl_timing(
    plugin: Path, tmp_path: Path
) -> None:
    """The chained plugin asks for Coll events alone: it gets one per collective and rank, none of the
    KernelCh events autoccl asks for; autoccl takes only the Colls it asked for and times them."""
    res, out = run_chained(tmp_path, plugin, counting(6), mask=1 << COLL)
    assert_clean(res)
    theirs = their_counts(out)
    assert theirs["starts"][COLL] == len(res.calls) and theirs["stops"][COLL] == len(res.calls), theirs
    assert sum(theirs["starts"]) == theirs["starts"][COLL], theirs
    ours = chained_counts(res)
    assert ours["starts"][KERNEL_CH] > 0 and ours["forwarded_starts"][KERNEL_CH] == 0, ours

    # The Colls autoccl took were paired with their decisions and timed. At most a couple per rank stay
    # untimed: NCCL reads the mask once per group, and a Coll of a group that began just before autoccl's
    # bits turned on reaches autoccl without the KernelCh events its bits would have asked for
    # (docs/observability.md); the search gives such a sample up as lost.
    matcher = [t for t in res.trace if t.get("ev") == "matcher"]
    assert len(matcher) == 4, matcher
    for m in matcher:
        assert m["measurements"] <= m["matched_colls"] <= m["measurements"] + 2, m
        assert m["unmatched_colls"] == 0 and m["dropped_mismatch"] == 0, m
    assert sum(m["measurements"] for m in matcher) > 0, matcher


@pytest.mark.sanitize
def test_a_plugin_gets_no_event_type_newer_than_its_version(plugin: Path, tmp_path: Path) -> None:
    """A v6 plugin whose mask asks for every bit (-1) behind a v7 NCCL: the kernel-phase bit (v7) is taken out
    of what it asks, so NCCL emits no phases and the plugin sees no event type it does not know."""
    res, out = run_chained(tmp_path, plugin, counting(6), mask=-1, profiler_version="7")
    assert_clean(res)
    theirs = their_counts(out)
    ours = chained_counts(res)
    assert theirs["unknown"] == 0 and ours["starts"][KERNEL_PHASE] == 0, (theirs, ours)
    assert theirs["starts"][KERNEL_CH] > 0, theirs


@pytest.mark.sanitize
def test_kernel_phases_alone_bring_their_kernel_channels(plugin: Path, tmp_path: Path) -> None:
    """A v7 plugin asking for kernel phases alone also gets the KernelCh events they are children of, as from
    NCCL itself: each phase names its own KernelCh handle as parent."""
    res, out = run_chained(tmp_path, plugin, counting(7), mask=1 << KERNEL_PHASE, profiler_version="7")
    assert_clean(res)
    theirs = their_counts(out)
    assert theirs["starts"][KERNEL_CH] > 0, theirs
    assert theirs["starts"][KERNEL_PHASE] == theirs["starts"][KERNEL_CH], theirs
    assert theirs["phase_parent_ok"] == theirs["starts"][KERNEL_PHASE], theirs
    assert sum(theirs["starts"]) == theirs["starts"][KERNEL_CH] + theirs["starts"][KERNEL_PHASE], theirs


CHAIN_WARNING = {
    "missing": "cannot be loaded",
    "no-symbol": "exports no profiler",
    "itself": "autoccl's own library",
}


@pytest.mark.parametrize("bad", sorted(CHAIN_WARNING))
def test_a_chain_that_cannot_load_is_one_warning(plugin: Path, tmp_path: Path, bad: str) -> None:
    """A path that cannot be loaded, a library with no profiler, or autoccl's own library (whose init chained
    to itself without end: the emulator died of a stack overflow): one WARN naming the variable; autoccl tunes
    and times as usual."""
    # libm: loadable everywhere the emulator runs (glibc), with no profiler in it.
    path = {"missing": str(tmp_path / "nothing.so"), "no-symbol": "libm.so.6", "itself": str(plugin)}[bad]
    env = {
        "AUTOCCL_MODE": "online",
        "AUTOCCL_HW": "GPU Xx4",
        "AUTOCCL_CACHE_DIR": str(tmp_path / "cache"),
        "AUTOCCL_PROFILER_CHAIN": path,
    }
    res = run(simple(nranks=2, repeat=30), plugin=plugin, env=env, timeout=120)
    assert all(c == 0 for c in res.returncodes), res.stderr[-2000:]
    warns = res.warn_lines()
    assert len(warns) == 1 and "AUTOCCL_PROFILER_CHAIN" in warns[0], warns
    assert CHAIN_WARNING[bad] in warns[0], warns
    assert any(t.get("ev") == "time" for t in res.trace)
    assert not any(t.get("ev") == "profiler_chain" for t in res.trace)
