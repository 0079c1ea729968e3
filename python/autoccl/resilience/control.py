"""The control plane: which ranks take part in a round, agreed through the job's key-value store.

One round per training step. A rank is *ready* for round s when its first gradient bucket of step s
exists (or, for a rank that fell behind, when it offers the gradient it finished late). It says so by
adding its bit to the round's mask (one atomic `add`); the rank whose bit completes the expected set
writes the decision itself, and the coordinator (the lowest rank of the group) writes it when the
ski-rental wait runs out. The decision is written with `compare_set` on an empty key, so the first
writer wins and every rank reads the same decision. Pure logic here; `Keys` and `Plane` do the store
I/O (any torch.distributed.Store).

A replacement worker asks to join by writing a request (`join/req/<i>`, its rank and a token of its
own). The rank that writes a full round's decision (every member there, nobody behind) admits the
requests pending then whose process is seen beating (a request outlives a newcomer that died, and
admitting it would stall the group for a time-out): the decision names them, so every rank grows the
group after the same round.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

MASK_BITS = 62  # ranks per mask word (a signed 64-bit counter in the store)


class Store(Protocol):
    def add(self, key: str, value: int) -> int: ...
    def set(self, key: str, value: str) -> None: ...
    def get(self, key: str) -> bytes: ...
    def check(self, keys: list[str]) -> bool: ...
    def compare_set(self, key: str, expected: str, desired: str) -> bytes: ...
    def delete_key(self, key: str) -> bool: ...


@dataclass(frozen=True)
class Decision:
    round: int
    kind: str  # sync (every rank of the group), partial, recover
    members: tuple[int, ...]  # global ranks whose contributions this round carries
    excused: Mapping[int, int] = field(default_factory=dict)  # after this round: rank -> round it left
    waited_ms: float = 0.0  # wait after the quorum was ready (coordinator's clock)
    budget_ms: float = 0.0  # the ski-rental wait it allowed
    reason: str = ""
    admit: Mapping[int, str] = field(default_factory=dict)  # newcomers in after this round: rank -> token

    def encode(self) -> str:
        return json.dumps(
            {
                "r": self.round,
                "k": self.kind,
                "m": list(self.members),
                "x": {str(k): v for k, v in sorted(self.excused.items())},
                "w": round(self.waited_ms, 3),
                "b": round(self.budget_ms, 3) if self.budget_ms < 1e12 else -1,
                "why": self.reason,
                "a": {str(k): v for k, v in sorted(self.admit.items())},
            },
            separators=(",", ":"),
        )

    @staticmethod
    def decode(text: bytes | str) -> Decision:
        d: dict[str, Any] = json.loads(text)
        return Decision(
            round=int(d["r"]),
            kind=str(d["k"]),
            members=tuple(int(m) for m in d["m"]),
            excused={int(k): int(v) for k, v in d.get("x", {}).items()},
            waited_ms=float(d.get("w", 0.0)),
            budget_ms=float(d.get("b", 0.0)),
            reason=str(d.get("why", "")),
            admit={int(k): str(v) for k, v in d.get("a", {}).items()},
        )


@dataclass(frozen=True)
class Rules:
    warmup_steps: int
    max_absent: int
    max_lag: int
    members_floor: int


@dataclass(frozen=True)
class RoundView:
    """What every rank knows before round `round`: the group and who is excused (from the previous
    decision). Every rank computes the same sets from it."""

    round: int
    group: tuple[int, ...]
    excused: Mapping[int, int]

    def tolerated(self, rules: Rules) -> frozenset[int]:
        """Excused ranks that may stay away this round (not yet max_lag rounds behind)."""
        if self.round < rules.warmup_steps:
            return frozenset()
        return frozenset(r for r, since in self.excused.items() if self.round - since < rules.max_lag)

    def expected(self, rules: Rules) -> frozenset[int]:
        return frozenset(self.group) - self.tolerated(rules)

    def required(self, rules: Rules) -> frozenset[int]:
        """Ranks this round cannot go without: everyone during warm-up, then the ranks that reached the
        staleness bound."""
        if self.round < rules.warmup_steps:
            return frozenset(self.group)
        return frozenset(r for r, since in self.excused.items() if self.round - since >= rules.max_lag) & set(
            self.group
        )

    def quorum(self, rules: Rules) -> int:
        """How many ranks must be ready before the ski-rental clock starts: all but max_absent of the
        expected ones, and no fewer than the floor of members (a late rank that rejoins counts)."""
        exp = self.expected(rules)
        if self.round < rules.warmup_steps:
            return len(exp)
        return max(1, len(exp) - rules.max_absent, min(len(self.group), rules.members_floor))

    def decide(
        self,
        present: Iterable[int],
        kind: str = "",
        waited_ms: float = 0.0,
        budget_ms: float = 0.0,
        admit: Mapping[int, str] | None = None,
    ) -> Decision:
        members = tuple(sorted(set(present) & set(self.group)))
        left_out = [r for r in self.group if r not in members]
        excused = {r: self.excused.get(r, self.round) for r in left_out}
        return Decision(
            self.round,
            kind or ("sync" if not left_out else "partial"),
            members,
            excused,
            waited_ms,
            budget_ms,
            admit={r: t for r, t in (admit or {}).items() if r not in self.group} if not left_out else {},
        )

    def may_admit(self, present: Iterable[int], rules: Rules) -> bool:
        """Newcomers come in only after a full round past warm-up: every member took part and nobody
        carries a late gradient into the next round, so that every member holds the same weights and
        has applied every round when the newcomer copies them."""
        return self.round >= rules.warmup_steps and not self.excused and set(self.group) <= set(present)

    def may_proceed(self, present: Iterable[int], rules: Rules) -> bool:
        """A partial decision is allowed: the required ranks are there, enough members, and at least
        one expected rank (the round is not made of late ranks only)."""
        p = set(present) & set(self.group)
        return (self.required(rules) <= p and len(p) >= min(rules.members_floor, len(self.group))) and bool(
            p & self.expected(rules)
        )

    def next_view(self, d: Decision) -> RoundView:
        return RoundView(d.round + 1, self.group, dict(d.excused))


def recover_decision(round_: int, reason: str, suspects: Iterable[int] = ()) -> Decision:
    return Decision(round_, "recover", tuple(sorted(set(suspects))), {}, reason=reason)


def mask_words(group: Iterable[int]) -> int:
    return max(group, default=0) // MASK_BITS + 1


def bits_of(words: list[int]) -> frozenset[int]:
    out = set()
    for w, v in enumerate(words):
        for b in range(MASK_BITS):
            if v >> b & 1:
                out.add(w * MASK_BITS + b)
    return frozenset(out)


@dataclass(frozen=True)
class Keys:
    epoch: int

    def mask(self, s: int, word: int) -> str:
        return f"e{self.epoch}/mask/{s}/{word}"

    def quorum(self, s: int) -> str:
        return f"e{self.epoch}/q/{s}"

    def decision(self, s: int) -> str:
        return f"e{self.epoch}/dec/{s}"

    def census(self, rank: int) -> str:
        return f"e{self.epoch}/census/{rank}"

    def sealed(self) -> str:
        return f"e{self.epoch}/members"

    @staticmethod
    def heartbeat(rank: int, token: str = "") -> str:
        """A rank's first process beats on hb/<rank>; a newcomer on a key of its own (its token)."""
        return f"hb/{rank}/{token}" if token else f"hb/{rank}"

    # Join requests and admissions live outside the epochs: a newcomer does not know the epoch.
    @staticmethod
    def newcomer_heartbeat(rank: int, token: str) -> str:
        """The key a newcomer beats on while its request `token` stands (a key per request)."""
        return Keys.heartbeat(rank, token)

    @staticmethod
    def join_count() -> str:
        return "join/n"

    @staticmethod
    def join_request(i: int) -> str:
        return f"join/req/{i}"

    @staticmethod
    def admission(rank: int) -> str:
        return f"join/admit/{rank}"

    @staticmethod
    def run_ended() -> str:
        return "join/ended"


class JoinRequests:
    """The newest join request of each rank, read incrementally: a request is written once, under the
    index it counted (`join/n`), so only indices not read yet are read again."""

    def __init__(self) -> None:
        self._next = 0  # indices below this are read, or in _unwritten
        self._unwritten: set[int] = set()  # counted, not yet written (its process may have died between)
        self._newest: dict[int, tuple[int, str]] = {}  # rank -> (index, token)

    def newest(self, store: Store) -> dict[int, str]:
        n = int(store.add(Keys.join_count(), 0))
        for i in sorted(self._unwritten | set(range(self._next, n))):
            key = Keys.join_request(i)
            if not store.check([key]):
                self._unwritten.add(i)
                continue
            self._unwritten.discard(i)
            try:
                req = json.loads(store.get(key))
                r, token = int(req["rank"]), str(req["token"])
            except (ValueError, KeyError, TypeError):  # not a newcomer's request: nobody to admit
                continue
            if r not in self._newest or self._newest[r][0] < i:
                self._newest[r] = (i, token)
        self._next = max(self._next, n)
        return {r: token for r, (_, token) in self._newest.items()}


class Plane:
    """Store I/O of one epoch's control plane (one instance per thread: stores are not shared)."""

    def __init__(
        self,
        store: Store,
        epoch: int,
        group: tuple[int, ...],
        rules: Rules,
        requests: JoinRequests | None = None,
    ) -> None:
        self.store = store
        self.keys = Keys(epoch)
        self.group = group
        self.rules = rules
        self.words = mask_words(group)
        # The thread's reader of join requests, kept across its planes so an admitting round reads only the
        # requests written since (none given: one for this plane, which reads them all).
        self.requests = requests if requests is not None else JoinRequests()

    def register(
        self,
        view: RoundView,
        rank: int,
        admitting: bool = False,
        alive: Callable[[int, str], bool] | None = None,
    ) -> Decision | None:
        """Add this rank to round view.round; if that completes the expected set, write the decision
        (first writer wins) and return the decision in force. Crossing the quorum sets the quorum key
        that starts the coordinator's clock. With `admitting`, a full round's decision admits the
        join requests pending (the caller passes False where the round is the run's last) for which
        `alive(rank, token)` holds."""
        s = view.round
        word = rank // MASK_BITS
        mine = self.store.add(self.keys.mask(s, word), 1 << (rank % MASK_BITS))
        words = [mine if w == word else self.store.add(self.keys.mask(s, w), 0) for w in range(self.words)]
        present = bits_of(words) & set(self.group)
        before = present - {rank}
        exp = view.expected(self.rules)
        q = view.quorum(self.rules)
        decided: Decision | None = None
        if exp <= present and not exp <= before:
            admit = self.join_requests(alive) if admitting and view.may_admit(present, self.rules) else {}
            d = view.decide(present, admit=admit)
            decided = Decision.decode(self.store.compare_set(self.keys.decision(s), "", d.encode()))
        if len(present) >= q > len(before) or decided is not None:
            self.store.set(self.keys.quorum(s), "1")
        return decided

    def join_requests(self, alive: Callable[[int, str], bool] | None = None) -> dict[int, str]:
        """Pending join requests of ranks outside the group: rank -> token (a rank's newest request;
        one already admitted, or superseded by a newer one, is not pending; with `alive`, one for which
        alive(rank, token) is false is not either)."""
        pending = {}
        for r, token in self.requests.newest(self.store).items():
            if r in self.group:
                continue
            adm = Keys.admission(r)
            if self.store.check([adm]) and json.loads(self.store.get(adm)).get("token") == token:
                continue
            if alive is not None and not alive(r, token):
                continue
            pending[r] = token
        return pending

    def present(self, s: int) -> frozenset[int]:
        return bits_of([self.store.add(self.keys.mask(s, w), 0) for w in range(self.words)])

    def propose(self, d: Decision) -> Decision:
        """Write `d` unless a decision exists; return the decision in force."""
        return Decision.decode(self.store.compare_set(self.keys.decision(d.round), "", d.encode()))

    def decided(self, s: int) -> Decision | None:
        key = self.keys.decision(s)
        if not self.store.check([key]):
            return None
        return Decision.decode(self.store.get(key))

    def quorum_reached(self, s: int) -> bool:
        return bool(self.store.check([self.keys.quorum(s)]))

    def forget(self, s: int) -> None:
        """Drop the keys of an old round (the store would otherwise grow by a few keys a step)."""
        for key in [self.keys.quorum(s), self.keys.decision(s)] + [
            self.keys.mask(s, w) for w in range(self.words)
        ]:
            try:
                self.store.delete_key(key)
            except Exception:  # a key never written is not an error
                pass
