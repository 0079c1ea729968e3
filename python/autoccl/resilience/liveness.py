"""Heartbeats through the store: every rank bumps its counter every `period_s` and watches the others'.

A counter is used instead of a time stamp so that clocks of different hosts never matter: a rank is
taken as lost when its counter has not moved for `dead_after_s` on the watcher's own monotonic clock.
The thread runs beside training and beside the reducer's collectives, so a rank stuck in a collective
or in a long kernel still counts as alive; only a process that is gone (or frozen) goes silent."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from autoccl.resilience.control import Keys, Store


class Liveness(threading.Thread):
    def __init__(
        self,
        store_factory: Callable[[], Store],
        rank: int,
        ranks: tuple[int, ...],
        period_s: float,
        dead_after_s: float,
    ) -> None:
        super().__init__(name=f"autoccl-heartbeat-{rank}", daemon=True)
        self._store_factory = store_factory
        self.rank = rank
        self.period_s = period_s
        self.dead_after_s = dead_after_s
        self._lock = threading.Lock()
        self._ranks = ranks
        now = time.monotonic()
        self._seen: dict[int, tuple[int, float]] = {r: (-1, now) for r in ranks}
        self._polled = now  # the last time the counters were read
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def watch(self, ranks: tuple[int, ...]) -> None:
        """Watch only these ranks from now on (after the group shrank)."""
        with self._lock:
            self._ranks = ranks
            self._seen = {r: self._seen.get(r, (-1, time.monotonic())) for r in ranks}

    def beat(self, store: Store) -> None:
        store.add(Keys.heartbeat(self.rank), 1)

    def run(self) -> None:
        try:
            store = self._store_factory()
            while not self._halt.is_set():
                self.beat(store)
                with self._lock:
                    ranks = self._ranks
                keys = [Keys.heartbeat(r) for r in ranks]
                # multi_get would block on a key never written; every rank writes its key before
                # the reducer starts (Reducer.__init__), so all exist here.
                values = [int(v) for v in store.multi_get(keys)]  # type: ignore[attr-defined]
                now = time.monotonic()
                with self._lock:
                    for r, v in zip(ranks, values, strict=True):
                        last, _ = self._seen.get(r, (-1, now))
                        if v != last:
                            self._seen[r] = (v, now)
                    self._polled = now
                self._halt.wait(self.period_s)
        except BaseException as e:  # reported to the reducer, which stops cleanly
            self.error = e

    def silent_for(self, rank: int) -> float:
        """How long the rank's counter had not moved at the last read (a watcher starved of CPU judges
        nobody: the time since its last read does not count)."""
        with self._lock:
            _, since = self._seen.get(rank, (-1, self._polled))
            return max(0.0, self._polled - since)

    def alive(self, rank: int) -> bool:
        if rank == self.rank:
            return True
        return self.silent_for(rank) < self.dead_after_s

    def dead(self, ranks: tuple[int, ...] | frozenset[int] | set[int]) -> frozenset[int]:
        return frozenset(r for r in ranks if not self.alive(r))

    def stop(self) -> None:
        self._halt.set()
