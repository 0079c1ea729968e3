"""Shared checks for the emulator tests."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from autoccl.emu import RunResult

Record = dict[str, Any]


def assert_clean(res: RunResult) -> None:
    assert res.returncodes and all(c == 0 for c in res.returncodes), res.stderr[-3000:]
    assert res.violations == 0, res.stderr[-3000:]
    assert not res.divergences, res.divergences[:5]
    assert "DIVERGENCE" not in res.stderr
    assert res.calls, "no calls recorded"
    assert not res.trace_bad_lines, res.trace_bad_lines[:3]  # a trace line the library cut short or broke


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
