"""Shared checks for the emulator tests."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import autoccl
from autoccl.emu import RunResult

ROOT = Path(__file__).resolve().parents[2]

Record = dict[str, Any]


def assert_clean(res: RunResult) -> None:
    assert res.returncodes and all(c == 0 for c in res.returncodes), res.stderr[-3000:]
    assert res.violations == 0, res.stderr[-3000:]
    assert not res.divergences, res.divergences[:5]
    assert "DIVERGENCE" not in res.stderr
    assert res.calls, "no calls recorded"
    assert not res.trace_bad_lines, res.trace_bad_lines[:3]  # a trace line the library cut short or broke


def run_emu_benchmark(script: str, *args: str) -> tuple[str, dict[str, str]]:
    """Runs benchmarks/emu/`script` with `args` (the autoccl this test imports, wherever it is installed,
    and its binaries as this test finds them): its stdout, and its markdown table's rows by their first
    cell."""
    env = dict(os.environ, PYTHONPATH=str(Path(autoccl.__file__).resolve().parents[1]))
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "emu" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    ).stdout
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    return out, rows


def by_rank_config(calls: list[Record]) -> dict[tuple[str, int, int, int], set[tuple[Any, ...]]]:
    out: dict[tuple[str, int, int, int], set[tuple[Any, ...]]] = defaultdict(set)
    for r in calls:
        out[(r["comm"], r["group"], r["rep"], r["op"])].add(
            (r["algo"], r["proto"], r["channels"], r["chunk"])
        )
    return out


def assert_default(calls: list[Record]) -> None:
    """Every call applied what NCCL chooses without a tuner."""
    for r in calls:
        got = (r["algo"], r["proto"], r["channels"], r["chunk"])
        want = (r["def_algo"], r["def_proto"], r["def_channels"], r["def_chunk"])
        assert got == want, r


def config_key(rec: Record) -> tuple[str, str, int, int]:
    return (rec["algo"], rec["proto"], int(rec["channels"]), int(rec["chunk"]))
