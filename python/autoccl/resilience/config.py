"""Settings and errors of the straggler-tolerant, failure-surviving all-reduce. Pure: no torch."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autoccl.resilience.skirental import RULES


def first_line(e: BaseException) -> str:
    """The first sentence of an error, without gloo's source-location prefix (for one-line messages)."""
    text = str(e).strip().splitlines()
    line = re.sub(r"^\[[^\]]*\]\s*", "", text[0]) if text else type(e).__name__
    m = re.match(r"(.+?[.!?])(\s|$)", line)
    return (m.group(1) if m else line)[:200]


class ResilienceError(RuntimeError):
    """The resilient reducer cannot go on (the message is one sentence saying why)."""


class MembershipDisagreement(ResilienceError):
    """Ranks applied different views of which ranks took part in a round (a protocol bug or a corrupted
    decision): every rank stops rather than let the weights drift apart."""


class RankExcluded(ResilienceError):
    """This rank was left out of the group that survived a failure (it answered too late)."""


class RunEnded(ResilienceError):
    """A newcomer asked to join a run that ended before it could be admitted (nothing is wrong: there is
    nothing left to join)."""


class ConfigError(ValueError):
    """A setting out of range (the message is one sentence naming it)."""


@dataclass(frozen=True)
class ResilienceConfig:
    """What the reducer may do. Defaults suit a GPU job; tests shorten the time-outs.

    rule: `break-even` (2-competitive) or `randomized` (e/(e-1)-competitive in expectation).
    accuracy_weight: how much group time a lost rank-step of samples is worth, as a multiple of
        `absent / world * step time` (0 proceeds at once without a late rank, large values wait longer).
    max_absent: at most this many late ranks are left out of one step.
    min_members: never proceed with fewer ranks (0: a majority of the group).
    max_lag: a rank left out is waited for again once it is this many steps behind; this bounds the
        staleness of its gradient (<= max_lag steps) and the results a late rank keeps (<= max_lag + 1).
    warmup_steps: synchronous steps first (DDP settles its buckets after step 0, and the step period the
        wait budget is made of is measured from step 2 on).
    heartbeat_s / dead_after_s: liveness: a rank whose heartbeat stops for dead_after_s is taken as lost.
    stall_s: a rank that is alive but keeps a required step waiting this long is taken as lost too.
    collective_timeout_s: time-out of the reducer's own process group (a collective with a lost peer
        fails after at most this long).
    census_s: after a failure, how long the survivors wait for each other before sealing the new group
        (must exceed collective_timeout_s so that a survivor stuck in a collective is not left out).
    recovery_s: a recovery not finished this long after the loss was noticed is taken as hung: the rank
        logs every thread's stack and exits with status 75 rather than waiting forever (as PyTorch's NCCL
        watchdog ends a process whose collective timed out). Must exceed census_s + collective_timeout_s.
    admission_s: how long a replacement worker waits to be admitted (the group admits it after its next
        round that every member takes part in) before it gives up with an error.
    agent_stream: CUDA only: the agent copies the buckets and issues their all-reduces on a stream of its
        own that waits for each bucket's gradient alone. Without it they go on the device's current
        stream, behind the backward kernels the training thread queued after the bucket (communication
        no longer overlaps backward). Off until measured on GPUs (docs/resilience.md, "Measured").
    """

    rule: str = "break-even"
    accuracy_weight: float = 1.0
    max_absent: int = 1
    min_members: int = 0
    max_lag: int = 4
    warmup_steps: int = 5
    heartbeat_s: float = 0.2
    dead_after_s: float = 5.0
    stall_s: float = 300.0
    collective_timeout_s: float = 60.0
    census_s: float = 90.0
    recovery_s: float = 300.0
    admission_s: float = 600.0
    seed: int = 0
    agent_stream: bool = False

    def validate(self) -> ResilienceConfig:
        def bad(name: str, why: str) -> ConfigError:
            return ConfigError(f"resilience setting {name} {why}")

        if self.rule not in RULES:
            raise bad("rule", f"must be one of {', '.join(RULES)}, not {self.rule!r}")
        if not (math.isfinite(self.accuracy_weight) and self.accuracy_weight >= 0):
            raise bad("accuracy_weight", "must be a finite number >= 0")
        if self.max_absent < 0:
            raise bad("max_absent", "must be >= 0")
        if self.min_members < 0:
            raise bad("min_members", "must be >= 0")
        if self.max_lag < 1:
            raise bad("max_lag", "must be >= 1")
        if self.warmup_steps < 2:
            raise bad("warmup_steps", "must be >= 2 (DDP rebuilds its buckets after the first step)")
        for name in (
            "heartbeat_s",
            "dead_after_s",
            "stall_s",
            "collective_timeout_s",
            "census_s",
            "recovery_s",
            "admission_s",
        ):
            v = getattr(self, name)
            if not (math.isfinite(v) and v > 0):
                raise bad(name, "must be a positive number of seconds")
        if self.dead_after_s < 3 * self.heartbeat_s:
            raise bad("dead_after_s", "must be at least 3 heartbeats long")
        if self.census_s <= self.collective_timeout_s:
            raise bad("census_s", "must exceed collective_timeout_s")
        if self.recovery_s <= self.census_s + self.collective_timeout_s:
            raise bad("recovery_s", "must exceed census_s + collective_timeout_s")
        return self

    def members_floor(self, world: int) -> int:
        return self.min_members if self.min_members > 0 else world // 2 + 1 if world > 2 else 1
