"""Heartbeats through the store: every rank bumps its counter every `period_s` and watches the others'.

A counter is used instead of a time stamp so that clocks of different hosts never matter: a rank is
taken as lost when its counter has not moved for `dead_after_s` on the watcher's own monotonic clock.
The thread runs beside training and beside the reducer's collectives, so a rank stuck in a collective
or in a long kernel still counts as alive; only a process that is gone (or frozen) goes silent. Each
process of a rank has a key of its own: a replacement worker's heartbeat must not revive the process it
replaces, which the survivors may still be waiting to see lost.

Beside the watched ranks, the thread can follow keys that belong to no member (`follow`: the heartbeat
keys of every rank's newest join request): such a key counts as beating only once its counter was seen
moving, and for `dead_after_s` after the last move seen. A request is admitted on that evidence alone,
so a newcomer that died before it was seen beating is never admitted (the group would wait a time-out
for it); one that dies later can be, within `dead_after_s` of its last beat."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

from autoccl.resilience.control import Store


class Liveness(threading.Thread):
    def __init__(
        self,
        store_factory: Callable[[], Store],
        rank: int,
        key: str,
        watched: Mapping[int, str],
        period_s: float,
        dead_after_s: float,
        follow: Callable[[Store], list[str]] | None = None,
    ) -> None:
        """`key`: this process's heartbeat key; `watched`: rank -> the heartbeat key of its process;
        `follow`: read each period, the keys (written already) to follow beside them."""
        super().__init__(name=f"autoccl-heartbeat-{rank}", daemon=True)
        self._store_factory = store_factory
        self.rank = rank
        self.key = key
        self.period_s = period_s
        self.dead_after_s = dead_after_s
        self._lock = threading.Lock()
        now = time.monotonic()
        self._keys = dict(watched)
        self._seen: dict[int, tuple[str, int, float]] = {r: (k, -1, now) for r, k in watched.items()}
        self._polled = now  # the last time the counters were read
        self._follow = follow
        # key -> (value, when it was first read, when it last moved: None until it does)
        self._followed: dict[str, tuple[int, float, float | None]] = {}
        self._halt = threading.Event()
        self.error: BaseException | None = None

    def watch(self, watched: Mapping[int, str]) -> None:
        """Watch these ranks' processes from now on (after the group shrank or grew). A rank whose key
        changed (another process of it) is watched from now on, as if new."""
        now = time.monotonic()
        with self._lock:
            self._keys = dict(watched)
            old = self._seen
            self._seen = {
                r: old[r] if r in old and old[r][0] == k else (k, -1, now) for r, k in watched.items()
            }

    def rekey(self, key: str) -> None:
        """Beat on another key from now on (a newcomer's next request; the key exists already)."""
        with self._lock:
            self.key = key
            if self.rank in self._keys:
                self._keys[self.rank] = key
                self._seen[self.rank] = (key, -1, time.monotonic())

    @property
    def watched(self) -> dict[int, str]:
        with self._lock:
            return dict(self._keys)

    def beat(self, store: Store) -> None:
        with self._lock:
            key = self.key
        store.add(key, 1)

    def run(self) -> None:
        try:
            store = self._store_factory()
            while not self._halt.is_set():
                self.beat(store)
                with self._lock:
                    items = list(self._keys.items())
                # multi_get would block on a key never written; every process writes its key before
                # anyone watches it (Reducer.__init__, and a newcomer before it asks), so all exist here.
                followed = self._follow(store) if self._follow is not None else []
                keys = [k for _, k in items] + followed
                values = [int(v) for v in store.multi_get(keys)]  # type: ignore[attr-defined]
                now = time.monotonic()
                with self._lock:
                    for k, v in zip(followed, values[len(items) :], strict=True):
                        last, first, moved = self._followed.get(k, (v, now, None))
                        self._followed[k] = (v, first, now if v != last else moved)
                    for (r, k), v in zip(items, values[: len(items)], strict=True):
                        if self._keys.get(r) != k:  # watch() changed it while this poll ran
                            continue
                        key, last, _ = self._seen.get(r, (k, -1, now))
                        if v != last or key != k:
                            self._seen[r] = (k, v, now)
                    self._polled = now
                self._halt.wait(self.period_s)
        except BaseException as e:  # reported to the reducer, which stops cleanly
            self.error = e

    def silent_for(self, rank: int) -> float:
        """How long the rank's counter had not moved at the last read (a watcher starved of CPU judges
        nobody: the time since its last read does not count)."""
        with self._lock:
            _, _, since = self._seen.get(rank, ("", -1, self._polled))
            return max(0.0, self._polled - since)

    def alive(self, rank: int) -> bool:
        if rank == self.rank:
            return True
        return self.silent_for(rank) < self.dead_after_s

    def beating(self, key: str) -> bool:
        """Whether a followed key's counter was seen moving within dead_after_s of the last read (a key
        not read yet, or never seen moving, is not)."""
        with self._lock:
            seen = self._followed.get(key)
            return seen is not None and seen[2] is not None and self._polled - seen[2] < self.dead_after_s

    def followed_silent_for(self, key: str) -> float | None:
        """How long a followed key's counter had not moved at the last read (since it was first read, if
        it never moved); None for a key not read yet."""
        with self._lock:
            seen = self._followed.get(key)
            if seen is None:
                return None
            _, first, moved = seen
            return max(0.0, self._polled - (moved if moved is not None else first))

    def dead(self, ranks: tuple[int, ...] | frozenset[int] | set[int]) -> frozenset[int]:
        return frozenset(r for r in ranks if not self.alive(r))

    def stop(self) -> None:
        self._halt.set()
