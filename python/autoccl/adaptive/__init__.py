"""Adaptive collectives: measure the machine, synthesize from it, run the schedule (docs/adaptive.md)."""

from __future__ import annotations

from autoccl.adaptive.collectives import (
    all_gather,
    all_gather_into_tensor,
    all_reduce,
    broadcast,
    reduce,
    reduce_scatter,
    reduce_scatter_tensor,
)
from autoccl.adaptive.plan import Plan, PlanError

__all__ = [
    "Plan",
    "PlanError",
    "all_gather",
    "all_gather_into_tensor",
    "all_reduce",
    "broadcast",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
]
