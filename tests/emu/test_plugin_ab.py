"""The two-builds comparison of the emulator (benchmarks/emu/plugin_ab.py) runs: one build against itself, one
size, one run a mode. Idle and observe make the same decisions on every run of one build (they decide
nothing or NCCL's choice), so their rows must say B = A; online's may differ (its threads are not seeded).
Its timings are read in benchmarks, not asserted."""

from __future__ import annotations

import json
from pathlib import Path

from emu_helpers import run_emu_benchmark


def test_plugin_ab_compares_a_build_with_itself(plugin: Path, tmp_path: Path) -> None:
    lib = str(plugin.parent)
    out, rows = run_emu_benchmark(
        "plugin_ab.py", "--a", lib, "--b", lib, "--reps", "1", "--sizes", "1", "--out", str(tmp_path)
    )
    assert set(rows) >= {"plain", "online", "idle", "observe"}, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    for mode in ("plain", "idle", "observe"):
        m = summary["modes"][mode]
        assert m["configs_identical_runs"] == 1, (mode, m)
        assert all(r == 1.0 for r in m["loop_time_b_over_a"].values()), (mode, m)
    assert set(summary["modes"]["online"]["loop_time_b_over_a"]) == {
        f"{c} 1 MiB" for c in ("allgather", "reducescatter", "allreduce")
    }
