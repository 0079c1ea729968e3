"""Straggler-tolerant, failure-surviving gradient all-reduce for PyTorch DDP (opt-in).

`Reducer` registers a DDP communication hook: a late rank is left out of a step when waiting would
cost more than the step it loses (a ski-rental rule with costs measured at run time, 2-competitive),
its gradient is folded into a later step (bounded staleness, the same weights on every rank), and a
lost rank is dropped (shrink_group where the backend has it, a new group otherwise) while the others
go on. docs/resilience.md explains the protocol, its guarantees and its measured cost."""

from autoccl.resilience.config import (
    ConfigError,
    MembershipDisagreement,
    RankExcluded,
    ResilienceConfig,
    ResilienceError,
    RunEnded,
)
from autoccl.resilience.skirental import competitive_ratio

__all__ = [
    "ConfigError",
    "MembershipDisagreement",
    "RankExcluded",
    "Reducer",
    "ResilienceConfig",
    "ResilienceError",
    "RunEnded",
    "competitive_ratio",
]


def __getattr__(name: str) -> object:
    # torch is imported only when the reducer itself is used
    if name == "Reducer":
        from autoccl.resilience.reducer import Reducer

        return Reducer
    raise AttributeError(name)
