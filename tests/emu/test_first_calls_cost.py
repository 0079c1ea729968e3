"""The emulator part of the plugin-overhead benchmark (benchmarks/emu/first_calls_cost.py) runs, and reads the
plugin's own host time per call in every mode the GPU overhead plans compare. Its numbers are not asserted:
targets live in benchmarks."""

from __future__ import annotations

from pathlib import Path

from emu_helpers import run_emu_benchmark


def test_first_calls_cost_runs_every_mode(plugin: Path) -> None:
    out, rows = run_emu_benchmark("first_calls_cost.py", "--reps", "1")
    assert set(rows) >= {"plain", "idle", "idle-untimed", "observe", "online-warm"}, out
    # without the plugin the emulator counts no plugin time on any call
    assert rows["plain"].startswith("| plain | 0.0 µs | 0.0 µs | 0.0 µs | 0.00 µs |"), out
