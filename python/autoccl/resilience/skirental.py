"""The wait-or-proceed rule of the straggler-tolerant all-reduce, as a ski-rental problem. Pure: no torch.

Every step, once all but `max_absent` of the expected ranks are ready (the moment the group *could* go
on), the group either keeps waiting for the late ranks (renting: it costs the idle time of the ready
ranks, in wall time of the step) or proceeds without them (buying: a one-off cost B, here the wall time
the group would need to make up for what a partial step loses). The late rank's arrival time is unknown.

Break-even rule (deterministic): wait up to B, then proceed. If the late rank arrives after d <= B, the
cost is d, which is what an offline rule that knew d would pay; if it arrives later, the cost is
B (waited) + B (the partial step) = 2B against the offline min(d, B) = B. So the rule is 2-competitive,
the best ratio a deterministic rule can have.

Randomized rule: wait a time z drawn with density e^(z/B) / (B (e - 1)) on [0, B]; its expected cost is
at most e / (e - 1) ~ 1.582 times the offline optimum. The coordinator draws z, so every rank still
follows one decision.

The cost of a partial step, B, is measured at run time (`BuyCost`): a partial step makes the absent
rank's fresh gradient a stale one and costs that rank its next step (it rejoins in step with the group),
so the group loses the samples of `absent` of its `world` ranks for one step, worth
`absent / world * step_time` of group wall time; plus the measured extra communication time of the
rounds that fold a stale gradient in (the executor sends the stale gradient inside the next round's
all-reduce, so this term is about zero, and it is measured rather than assumed).
"""

from __future__ import annotations

import math
import random
import statistics
from collections import deque
from dataclasses import dataclass, field

RULES = ("break-even", "randomized")
BREAK_EVEN_RATIO = 2.0
RANDOMIZED_RATIO = math.e / (math.e - 1.0)


def competitive_ratio(rule: str) -> float:
    """Worst-case (break-even) or expected (randomized) cost relative to the offline optimum."""
    if rule == "break-even":
        return BREAK_EVEN_RATIO
    if rule == "randomized":
        return RANDOMIZED_RATIO
    raise ValueError(f"unknown ski-rental rule {rule!r}; expected one of {', '.join(RULES)}")


def online_cost(wait_s: float, arrival_s: float, buy_s: float) -> float:
    """Cost of waiting up to `wait_s` for a rank that arrives after `arrival_s` (inf: never)."""
    if arrival_s <= wait_s:
        return arrival_s
    return wait_s + buy_s


def offline_cost(arrival_s: float, buy_s: float) -> float:
    return min(arrival_s, buy_s)


@dataclass
class Median:
    """Running median of the last `window` samples."""

    window: int = 32
    _xs: deque[float] = field(default_factory=deque)

    def add(self, x: float) -> None:
        if not math.isfinite(x) or x < 0:
            return
        self._xs.append(x)
        while len(self._xs) > self.window:
            self._xs.popleft()

    def value(self, default: float = math.nan) -> float:
        return statistics.median(self._xs) if self._xs else default

    def __len__(self) -> int:
        return len(self._xs)


@dataclass
class BuyCost:
    """B in seconds, from what the run measures: the step period of the group and the duration of the
    rounds with and without a stale gradient folded in."""

    accuracy_weight: float = 1.0
    step: Median = field(default_factory=Median)
    plain_round: Median = field(default_factory=Median)
    fold_round: Median = field(default_factory=Median)

    def observe_step(self, period_s: float) -> None:
        self.step.add(period_s)

    def observe_round(self, duration_s: float, folded_stale: bool) -> None:
        (self.fold_round if folded_stale else self.plain_round).add(duration_s)

    def communication_s(self) -> float:
        if not len(self.fold_round) or not len(self.plain_round):
            return 0.0
        return max(0.0, self.fold_round.value() - self.plain_round.value())

    min_samples: int = 3

    def value(self, absent: int, world: int) -> float:
        """NaN until `min_samples` step periods have been measured (the caller then waits for
        everyone)."""
        if world <= 0 or absent <= 0:
            return 0.0
        if len(self.step) < self.min_samples:
            return math.nan
        step = self.step.value()
        return self.accuracy_weight * absent / world * step + self.communication_s()


@dataclass
class WaitRule:
    """How long to keep waiting after the quorum is ready, given the buy cost B."""

    rule: str = "break-even"
    seed: int = 0

    def __post_init__(self) -> None:
        competitive_ratio(self.rule)  # validates the name
        self._rng = random.Random(self.seed)

    def wait_s(self, buy_s: float) -> float:
        if not math.isfinite(buy_s):
            return math.inf
        if buy_s <= 0:
            return 0.0
        if self.rule == "break-even":
            return buy_s
        # Inverse CDF of the density e^(z/B) / (B (e - 1)) on [0, B]: z = B ln(1 + u (e - 1)).
        u = self._rng.random()
        return buy_s * math.log1p(u * (math.e - 1.0))
