"""Fault injection for benchmarks and tests: a straggler (a rank slowed on some steps) and a lost rank
(killed at a step). Pure except for `delay`, which burns or sleeps.

The draws depend only on (seed, step), so a synchronous and a resilient run of the same command see
the same delays on the same steps."""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass


class InjectionError(ValueError):
    """A malformed --straggler/--kill value (one sentence)."""


@dataclass(frozen=True)
class Straggler:
    rank: int
    prob: float
    lo: float  # step-time factor range: a delayed step takes lo..hi times the rank's usual step
    hi: float

    @staticmethod
    def parse(text: str) -> Straggler:
        m = re.fullmatch(r"\s*(\d+):([0-9.]+):([0-9.]+)(?:-([0-9.]+))?\s*", text)
        if not m:
            raise InjectionError(f"--straggler {text!r}: expected RANK:PROB:FACTOR or RANK:PROB:LO-HI")
        rank, prob, lo = int(m.group(1)), float(m.group(2)), float(m.group(3))
        hi = float(m.group(4)) if m.group(4) else lo
        if not 0.0 <= prob <= 1.0:
            raise InjectionError(f"--straggler {text!r}: the probability must be in [0, 1]")
        if not 1.0 <= lo <= hi:
            raise InjectionError(f"--straggler {text!r}: factors must satisfy 1 <= LO <= HI")
        return Straggler(rank, prob, lo, hi)

    def factor(self, seed: int, step: int) -> float:
        """The step-time factor of `step` on the straggler (1.0: not delayed)."""
        rng = random.Random(seed * 1_000_003 + step)
        if rng.random() >= self.prob:
            return 1.0
        return self.lo + (self.hi - self.lo) * rng.random()

    def label(self) -> str:
        f = f"{self.lo:g}" if self.lo == self.hi else f"{self.lo:g}-{self.hi:g}"
        return f"{self.rank}:{self.prob:g}:{f}"


@dataclass(frozen=True)
class Kill:
    rank: int
    step: int

    @staticmethod
    def parse(text: str) -> Kill:
        m = re.fullmatch(r"\s*(\d+):(\d+)\s*", text)
        if not m:
            raise InjectionError(f"--kill {text!r}: expected RANK:STEP")
        return Kill(int(m.group(1)), int(m.group(2)))

    def label(self) -> str:
        return f"{self.rank}:{self.step}"


def check_ranks(world: int, straggler: Straggler | None, kill: Kill | None, steps: int) -> None:
    if straggler is not None and straggler.rank >= world:
        raise InjectionError(f"--straggler rank {straggler.rank} is not below the {world} ranks")
    if kill is not None:
        if kill.rank >= world:
            raise InjectionError(f"--kill rank {kill.rank} is not below the {world} ranks")
        if world < 2:
            raise InjectionError("--kill needs at least 2 ranks (someone has to survive)")
        if not 0 < kill.step < steps:
            raise InjectionError(f"--kill step {kill.step} must be within the run's {steps} steps")


def delay(seconds: float, busy: bool) -> None:
    """Slow this rank down: `busy` keeps a CPU thread working (like slow compute), else it sleeps."""
    if seconds <= 0:
        return
    if not busy:
        time.sleep(seconds)
        return
    import torch

    a = torch.ones(128, 128)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        torch.mm(a, a)  # releases the GIL, so the rank's communication thread stays responsive
