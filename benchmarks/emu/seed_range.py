"""The `--seeds` argument of the emulator benchmarks that sweep scenario seeds: "5-13" or "7"."""

from __future__ import annotations


def seeds(text: str) -> list[int]:
    """The seeds of an inclusive range "LO-HI", or the one seed "N"."""
    lo, _, hi = text.partition("-")
    return list(range(int(lo), int(hi or lo) + 1))
