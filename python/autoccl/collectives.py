"""The collectives' arithmetic shared by the benchmark harness and the emulator's model."""

from __future__ import annotations


def bus_factor(coll: str, n: int) -> float:
    """busbw / algbw of a collective over n ranks (nccl-tests doc/PERFORMANCE.md): the share of the buffer
    each rank's links carry. Either spelling: all_reduce (nccl-tests, bench) or allreduce (the library)."""
    if n < 1:
        raise ValueError("world size must be >= 1")
    name = coll.replace("_", "").lower()
    if name == "allreduce":
        return 2 * (n - 1) / n
    if name in ("allgather", "reducescatter", "alltoall"):
        return (n - 1) / n
    if name in ("broadcast", "reduce"):
        return 1.0
    raise ValueError(f"unknown collective {coll!r}")
