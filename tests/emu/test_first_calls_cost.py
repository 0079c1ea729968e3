"""The emulator part of the plugin-overhead benchmark (benchmarks/emu/first_calls_cost.py) runs, and reads the
plugin's own host time per call in every mode the GPU overhead plans compare. Its numbers are not asserted:
targets live in benchmarks."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import autoccl

ROOT = Path(__file__).resolve().parents[2]


def test_first_calls_cost_runs_every_mode(plugin: Path) -> None:
    # the autoccl this test imports, wherever it is installed, and its binaries as this test finds them
    env = dict(os.environ, PYTHONPATH=str(Path(autoccl.__file__).resolve().parents[1]))
    script = ROOT / "benchmarks" / "emu" / "first_calls_cost.py"
    out = subprocess.run(
        [sys.executable, str(script), "--reps", "1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert set(rows) >= {"plain", "idle", "idle-untimed", "observe", "online-warm"}, out
    # without the plugin the emulator counts no plugin time on any call
    assert rows["plain"].startswith("| plain | 0.0 µs | 0.0 µs | 0.0 µs | 0.00 µs |"), out
