"""The two-builds comparison of the emulator (benchmarks/emu/plugin_ab.py) runs: one build against itself, one
size, one run a mode. Idle and observe make the same decisions on every run of one build (they decide
nothing or NCCL's choice), so their rows must say B = A; online's may differ (its threads are not seeded).
Its timings are read in benchmarks, not asserted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import autoccl

ROOT = Path(__file__).resolve().parents[2]


def test_plugin_ab_compares_a_build_with_itself(plugin: Path, tmp_path: Path) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(autoccl.__file__).resolve().parents[1]))
    lib = str(plugin.parent)
    script = str(ROOT / "benchmarks" / "emu" / "plugin_ab.py")
    args = ["--a", lib, "--b", lib, "--reps", "1", "--sizes", "1", "--out", str(tmp_path)]
    out = subprocess.run(
        [sys.executable, script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"plain", "online", "idle", "observe"}, out
    summary = json.loads((tmp_path / "summary.json").read_text())
    for mode in ("plain", "idle", "observe"):
        m = summary["modes"][mode]
        assert m["configs_identical_runs"] == 1, (mode, m)
        assert all(r == 1.0 for r in m["loop_time_b_over_a"].values()), (mode, m)
    assert set(summary["modes"]["online"]["loop_time_b_over_a"]) == {
        f"{c} 1 MiB" for c in ("allgather", "reducescatter", "allreduce")
    }
