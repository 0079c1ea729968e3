"""The ski-rental rule, the round's membership logic, the settings and the injection options (no
processes; the store tests use a real TCPStore in this process)."""

from __future__ import annotations

import datetime
import json
import math
import random

import pytest

from autoccl.resilience.config import ConfigError, ResilienceConfig
from autoccl.resilience.control import Decision, Keys, Plane, RoundView, Rules, bits_of, mask_words
from autoccl.resilience.inject import InjectionError, Kill, Straggler, check_ranks
from autoccl.resilience.skirental import (
    RANDOMIZED_RATIO,
    BuyCost,
    WaitRule,
    competitive_ratio,
    offline_cost,
    online_cost,
)

# ------------------------------------------------------------------------------------ ski rental


@pytest.mark.parametrize("buy", [0.01, 0.25, 3.0])
def test_break_even_is_two_competitive_and_tight(buy: float) -> None:
    rule = WaitRule("break-even")
    worst = 0.0
    for arrival in [buy * k / 50 for k in range(1, 400)] + [math.inf]:
        ratio = online_cost(rule.wait_s(buy), arrival, buy) / offline_cost(arrival, buy)
        worst = max(worst, ratio)
        assert ratio <= competitive_ratio("break-even") + 1e-9
    assert worst > 1.95  # an arrival just after the budget costs (almost) twice the optimum


def test_randomized_rule_expected_ratio() -> None:
    rule = WaitRule("randomized", seed=3)
    buy = 1.0
    draws = [rule.wait_s(buy) for _ in range(20000)]
    assert all(0.0 <= z <= buy for z in draws)
    for arrival in (0.3, 0.7, 0.99, 1.5, math.inf):
        expected = sum(online_cost(z, arrival, buy) for z in draws) / len(draws)
        assert expected / offline_cost(arrival, buy) <= RANDOMIZED_RATIO * 1.03
    # against an adversarial arrival just after the budget the deterministic rule pays 2x, this ~1.58x
    just_after = sum(online_cost(z, 1.0 + 1e-9, buy) for z in draws) / len(draws)
    assert just_after < 1.7


def test_buy_cost_is_measured() -> None:
    c = BuyCost(accuracy_weight=1.0)
    assert math.isnan(c.value(absent=1, world=4))  # nothing measured: wait for everyone
    for t in (0.10, 0.12):
        c.observe_step(t)
    assert math.isnan(c.value(absent=1, world=4))  # too few periods yet
    c.observe_step(0.11)
    assert c.value(1, 4) == pytest.approx(0.25 * 0.11)
    assert c.value(2, 4) == pytest.approx(0.5 * 0.11)
    for _ in range(5):
        c.observe_round(0.010, folded_stale=False)
        c.observe_round(0.014, folded_stale=True)
    assert c.communication_s() == pytest.approx(0.004)
    assert c.value(1, 4) == pytest.approx(0.25 * 0.11 + 0.004)
    eager = BuyCost(accuracy_weight=0.0)
    for _ in range(3):
        eager.observe_step(0.1)
    assert eager.value(1, 4) == 0.0  # proceeds at once without a late rank
    assert WaitRule().wait_s(math.nan) == math.inf


def test_unknown_rule() -> None:
    with pytest.raises(ValueError, match="unknown ski-rental rule"):
        WaitRule("always-wait")


# ------------------------------------------------------------------------------------ membership

RULES = Rules(warmup_steps=3, max_absent=1, max_lag=4, members_floor=3)
GROUP = (0, 1, 2, 3)


def test_warmup_rounds_wait_for_everyone() -> None:
    v = RoundView(1, GROUP, {})
    assert v.required(RULES) == frozenset(GROUP) and v.quorum(RULES) == 4
    assert not v.may_proceed({0, 1, 2}, RULES)


def test_excused_rank_is_tolerated_until_max_lag() -> None:
    d = RoundView(10, GROUP, {}).decide({0, 1, 2})
    assert d.kind == "partial" and d.members == (0, 1, 2) and d.excused == {3: 10}
    for s in range(11, 14):
        v = RoundView(s, GROUP, d.excused)
        assert v.expected(RULES) == frozenset({0, 1, 2}) and not v.required(RULES)
    v = RoundView(14, GROUP, d.excused)  # 4 rounds behind: waited for again
    assert 3 in v.expected(RULES) and v.required(RULES) == frozenset({3})
    assert not v.may_proceed({0, 1, 2}, RULES)
    back = v.decide({0, 1, 2, 3})
    assert back.kind == "sync" and back.excused == {}


def test_floor_and_quorum() -> None:
    v = RoundView(20, GROUP, {})
    assert v.quorum(RULES) == 3
    assert not v.may_proceed({0, 1}, RULES)  # below the floor of 3 members
    assert v.may_proceed({0, 1, 2}, RULES)
    # a late rank rejoining counts as a member (and towards the quorum) ...
    v2 = RoundView(21, GROUP, {3: 20})
    assert v2.expected(RULES) == frozenset({0, 1, 2}) and v2.quorum(RULES) == 3
    assert v2.may_proceed({0, 1, 3}, RULES)
    # ... but a round of late ranks only never proceeds
    v3 = RoundView(30, GROUP, {2: 29, 3: 29})
    assert not v3.may_proceed({2, 3}, RULES)


def test_rejoining_rank_starts_the_clock(store) -> None:  # type: ignore[no-untyped-def]
    """Rank 1 rejoins while rank 3 is slow: three of four are there, so the clock starts (the floor of
    three members is met) instead of waiting for rank 3 whatever it costs."""
    plane = Plane(store, 0, GROUP, RULES)
    v = RoundView(21, GROUP, {1: 20})
    plane.register(v, 0)
    plane.register(v, 2)
    assert not plane.quorum_reached(21)
    plane.register(v, 1)
    assert plane.quorum_reached(21) and plane.decided(21) is None


def test_decision_roundtrip() -> None:
    d = Decision(7, "partial", (0, 2, 3), {1: 5}, 12.5, 30.0, "why")
    assert Decision.decode(d.encode()) == d
    assert Decision.decode(Decision(1, "sync", (0,), {}, 0.0, math.inf).encode()).budget_ms == -1


def test_mask_words() -> None:
    assert mask_words(range(62)) == 1 and mask_words(range(63)) == 2
    assert bits_of([0b101, 1]) == frozenset({0, 2, 62})


@pytest.fixture
def store():  # type: ignore[no-untyped-def]
    dist = pytest.importorskip("torch.distributed")
    s = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=10), wait_for_workers=False)
    return dist.PrefixStore("t/", s)


def test_register_completes_the_round(store) -> None:  # type: ignore[no-untyped-def]
    plane = Plane(store, 0, GROUP, RULES)
    v = RoundView(5, GROUP, {})
    assert plane.register(v, 2) is None and not plane.quorum_reached(5)
    assert plane.register(v, 0) is None
    assert plane.register(v, 3) is None and plane.quorum_reached(5)  # 3 of 4: the clock starts
    d = plane.register(v, 1)
    assert d is not None and d.kind == "sync" and d.members == GROUP
    assert plane.decided(5) == d


def test_first_decision_wins(store) -> None:  # type: ignore[no-untyped-def]
    """The coordinator's partial decision and a last-moment registration race: one decision stands
    and every later reader gets it."""
    plane = Plane(store, 0, GROUP, RULES)
    v = RoundView(9, GROUP, {})
    for r in (0, 1, 2):
        plane.register(v, r)
    partial = plane.propose(v.decide(plane.present(9)))
    late = plane.register(v, 3)  # completes the mask, but the round is decided
    assert late == partial and partial.members == (0, 1, 2)
    assert Plane(store, 0, GROUP, RULES).decided(9) == partial
    # another epoch is another namespace
    assert Plane(store, 1, GROUP, RULES).decided(9) is None


def test_many_ranks_mask(store) -> None:  # type: ignore[no-untyped-def]
    group = tuple(range(130))
    rules = Rules(3, 1, 4, 66)
    plane = Plane(store, 0, group, rules)
    v = RoundView(4, group, {})
    for r in group[:-1]:
        assert plane.register(v, r) is None
    assert plane.present(4) == frozenset(group[:-1])
    assert plane.register(v, 129) is not None


# ------------------------------------------------------------------------------------ newcomers


def _ask(store, rank: int, token: str) -> None:  # type: ignore[no-untyped-def]
    """What a newcomer writes (Reducer._enter)."""
    i = int(store.add(Keys.join_count(), 1)) - 1
    store.set(Keys.join_request(i), json.dumps({"rank": rank, "token": token}))


def test_newcomers_come_in_only_after_a_full_round() -> None:
    admit = {4: "t4"}
    assert RoundView(10, GROUP, {}).decide(set(GROUP), admit=admit).admit == admit
    assert RoundView(10, GROUP, {}).decide({0, 1, 2}, admit=admit).admit == {}  # partial: nobody in
    assert RoundView(10, GROUP, {}).decide(set(GROUP), admit={2: "x"}).admit == {}  # a member already
    assert RoundView(10, GROUP, {}).may_admit(set(GROUP), RULES)
    assert not RoundView(1, GROUP, {}).may_admit(set(GROUP), RULES)  # warm-up: no bucket layout yet
    assert not RoundView(10, GROUP, {3: 9}).may_admit(set(GROUP), RULES)  # rank 3 carries a late gradient
    assert not RoundView(10, GROUP, {}).may_admit({0, 1, 2}, RULES)
    d = Decision(7, "sync", GROUP, {}, 0.0, 0.0, "", {5: "a", 4: "b"})
    assert Decision.decode(d.encode()) == d


def test_join_requests_pending(store) -> None:  # type: ignore[no-untyped-def]
    group = (0, 1, 3)
    plane = Plane(store, 1, group, RULES)
    assert plane.join_requests() == {}
    _ask(store, 2, "first")
    _ask(store, 3, "stale")  # rank 3 is in the group (an old process of it asked): not pending
    assert plane.join_requests() == {2: "first"}
    _ask(store, 2, "second")  # a newer process of rank 2: its request replaces the first
    assert plane.join_requests() == {2: "second"}
    store.set(Keys.admission(2), json.dumps({"token": "second"}))  # admitted: not pending any more
    assert plane.join_requests() == {}
    store.add(Keys.join_count(), 1)  # counted, its request not yet written: skipped, not waited for
    assert plane.join_requests() == {}


def test_join_requests_are_read_incrementally(store) -> None:  # type: ignore[no-untyped-def]
    from autoccl.resilience.control import JoinRequests

    book = JoinRequests()
    store.add(Keys.join_count(), 1)  # index 0 counted, its writer not yet done
    _ask(store, 2, "newer")  # index 1
    assert book.newest(store) == {2: "newer"}
    store.set(Keys.join_request(0), json.dumps({"rank": 2, "token": "older"}))  # written late
    _ask(store, 5, "five")
    assert book.newest(store) == {2: "newer", 5: "five"}  # the late write of an older index loses
    _ask(store, 5, "five-again")
    assert book.newest(store) == {2: "newer", 5: "five-again"}
    i = int(store.add(Keys.join_count(), 1)) - 1  # rank 6 counts its request ...
    assert book.newest(store) == {2: "newer", 5: "five-again"}
    store.set(Keys.join_request(i), json.dumps({"rank": 6, "token": "six"}))  # ... and writes it later
    assert book.newest(store) == {2: "newer", 5: "five-again", 6: "six"}
    _ask(store, 7, "x")
    store.set(Keys.join_request(int(store.add(Keys.join_count(), 1)) - 1), "not json")  # not a request
    assert book.newest(store) == {2: "newer", 5: "five-again", 6: "six", 7: "x"}


def test_planes_sharing_a_reader_read_each_request_once(store) -> None:  # type: ignore[no-untyped-def]
    """An admitting round on the training thread reads only the requests written since the thread's last
    read, whichever epoch's plane it goes through (a plane of its own used to read every request again)."""
    from autoccl.resilience.control import JoinRequests

    reads: list[str] = []

    class Counting:
        def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
            return getattr(store, name)

        def get(self, key: str):  # type: ignore[no-untyped-def]
            reads.append(key)
            return store.get(key)

    counting = Counting()
    book = JoinRequests()
    _ask(store, 2, "two")
    _ask(store, 4, "four")
    assert Plane(counting, 1, (0, 1, 3), RULES, book).join_requests() == {2: "two", 4: "four"}
    assert sorted(k for k in reads if k.startswith("join/req")) == [Keys.join_request(i) for i in (0, 1)]
    reads.clear()
    _ask(store, 5, "five")
    assert Plane(counting, 2, (0, 1, 2, 3), RULES, book).join_requests() == {4: "four", 5: "five"}
    assert [k for k in reads if k.startswith("join/req")] == [Keys.join_request(2)]


def test_the_full_rounds_decision_admits_only_beating_requests(store) -> None:  # type: ignore[no-untyped-def]
    group = (0, 1, 3)
    plane = Plane(store, 1, group, RULES)
    _ask(store, 2, "dead")
    _ask(store, 4, "alive")
    v = RoundView(30, group, {})
    for r in (0, 1):
        plane.register(v, r, admitting=True, alive=lambda r, t: t == "alive")
    d = plane.register(v, 3, admitting=True, alive=lambda r, t: t == "alive")
    assert d is not None and d.admit == {4: "alive"}


def test_a_request_counts_as_beating_only_once_seen_moving(store) -> None:  # type: ignore[no-untyped-def]
    """A join request is admitted only while its process is seen beating: a newcomer that died after
    asking (its counter written once, never again) must never count as beating."""
    import time

    from autoccl.resilience.liveness import Liveness

    def factory():  # type: ignore[no-untyped-def]
        return store.clone() if hasattr(store, "clone") else store

    dead_key, live_key = Keys.heartbeat(2, "dead"), Keys.heartbeat(4, "live")
    store.add(dead_key, 1)
    store.add(live_key, 1)
    store.add(Keys.heartbeat(0), 1)
    newcomer = Liveness(factory, 4, live_key, {4: live_key}, 0.02, 0.3)
    watcher = Liveness(
        factory, 0, Keys.heartbeat(0), {0: Keys.heartbeat(0)}, 0.02, 0.3, lambda _: [dead_key, live_key]
    )
    assert not watcher.beating(live_key) and watcher.followed_silent_for(live_key) is None  # not read yet
    newcomer.start()
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while not watcher.beating(live_key) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert watcher.beating(live_key)
        # read several times by now, never seen moving: not beating, long before dead_after_s
        assert watcher.followed_silent_for(dead_key) is not None and not watcher.beating(dead_key)
        while (watcher.followed_silent_for(dead_key) or 0.0) < 0.3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not watcher.beating(dead_key) and (watcher.followed_silent_for(dead_key) or 0.0) >= 0.3
        newcomer.stop()
        newcomer.join(timeout=5)
        while watcher.beating(live_key) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not watcher.beating(live_key), "a newcomer that stopped beating still counts as beating"
    finally:
        newcomer.stop()
        watcher.stop()
        newcomer.join(timeout=5)
        watcher.join(timeout=5)


def test_the_full_rounds_decision_admits(store) -> None:  # type: ignore[no-untyped-def]
    group = (0, 1, 3)
    plane = Plane(store, 1, group, RULES)
    _ask(store, 2, "tok")
    v = RoundView(30, group, {})
    for r in (0, 1):
        assert plane.register(v, r, admitting=True) is None
    d = plane.register(v, 3, admitting=True)
    assert d is not None and d.kind == "sync" and d.admit == {2: "tok"}
    # the run's last round (admitting=False) and a partial round admit nobody
    v2 = RoundView(31, group, {})
    for r in group:
        d2 = plane.register(v2, r, admitting=False)
    assert d2 is not None and d2.admit == {}
    v3 = RoundView(32, group, {})
    for r in (0, 1):
        plane.register(v3, r, admitting=True)
    partial = plane.propose(v3.decide(plane.present(32)))
    assert partial.kind == "partial" and partial.admit == {}


def test_a_newcomers_heartbeat_does_not_revive_the_process_it_replaces(store) -> None:  # type: ignore[no-untyped-def]
    """Rank 2's first process stops; a replacement for rank 2 beats meanwhile (it starts before the
    survivors see the loss). The survivors must still see rank 2 lost: a census that took the newcomer
    for the old process waited census_s for it."""
    import time

    from autoccl.resilience.liveness import Liveness

    def factory():  # type: ignore[no-untyped-def]
        return store.clone() if hasattr(store, "clone") else store

    old_key, new_key = Keys.heartbeat(2), Keys.heartbeat(2, "tok")
    store.add(old_key, 1)
    store.add(Keys.heartbeat(0), 1)
    newcomer = Liveness(factory, 2, new_key, {2: new_key}, 0.02, 0.3)
    watcher = Liveness(factory, 0, Keys.heartbeat(0), {0: Keys.heartbeat(0), 2: old_key}, 0.02, 0.3)
    store.add(new_key, 1)
    newcomer.start()
    watcher.start()
    try:
        deadline = time.monotonic() + 10
        while not watcher.dead({2}) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert watcher.dead({2}) == {2}, "the newcomer's heartbeat kept the lost process alive"
        watcher.watch({0: Keys.heartbeat(0), 2: new_key})  # admitted: its own key is watched from now on
        time.sleep(0.5)
        assert not watcher.dead({2})
    finally:
        newcomer.stop()
        watcher.stop()
        newcomer.join(timeout=5)
        watcher.join(timeout=5)


# ------------------------------------------------------------------------------ settings, inject


@pytest.mark.parametrize(
    ("field", "value", "msg"),
    [
        ("rule", "sometimes", "rule must be one of"),
        ("max_lag", 0, "max_lag must be >= 1"),
        ("warmup_steps", 1, "warmup_steps must be >= 2"),
        ("dead_after_s", 0.1, "at least 3 heartbeats"),
        ("census_s", 10.0, "must exceed collective_timeout_s"),
        ("accuracy_weight", math.nan, "finite"),
        ("admission_s", 0.0, "admission_s must be a positive number"),
    ],
)
def test_config_errors(field: str, value: object, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        ResilienceConfig(**{field: value}).validate()  # type: ignore[arg-type]


def test_members_floor() -> None:
    cfg = ResilienceConfig()
    assert [cfg.members_floor(n) for n in (1, 2, 3, 4, 8)] == [1, 1, 2, 3, 5]
    assert ResilienceConfig(min_members=2).members_floor(8) == 2


def test_straggler_spec() -> None:
    s = Straggler.parse("3:0.2:2-5")
    assert (s.rank, s.prob, s.lo, s.hi) == (3, 0.2, 2.0, 5.0) and s.label() == "3:0.2:2-5"
    draws = [s.factor(7, i) for i in range(5000)]
    assert draws == [s.factor(7, i) for i in range(5000)]  # the same in every run
    slow = [f for f in draws if f > 1.0]
    assert 0.17 < len(slow) / len(draws) < 0.23 and all(2.0 <= f <= 5.0 for f in slow)
    assert Straggler.parse("1:1:3").factor(0, 5) == 3.0
    random.seed(1)
    before = s.factor(7, 11)
    random.seed(2)
    assert s.factor(7, 11) == before  # the draws use their own generator, not the global one


@pytest.mark.parametrize("bad", ["3", "a:0.2:2", "1:1.5:2", "1:0.2:0.5", "1:0.2:4-2"])
def test_straggler_spec_errors(bad: str) -> None:
    with pytest.raises(InjectionError, match="--straggler"):
        Straggler.parse(bad)


def test_kill_spec() -> None:
    assert Kill.parse("2:150") == Kill(2, 150)
    with pytest.raises(InjectionError, match="RANK:STEP"):
        Kill.parse("2")
    with pytest.raises(InjectionError, match="not below the 4 ranks"):
        check_ranks(4, None, Kill(4, 3), 10)
    with pytest.raises(InjectionError, match="within the run"):
        check_ranks(4, None, Kill(1, 10), 10)
    with pytest.raises(InjectionError, match="at least 2 ranks"):
        check_ranks(1, None, Kill(0, 3), 10)
    with pytest.raises(InjectionError, match="--straggler rank 5"):
        check_ranks(4, Straggler(5, 0.1, 2, 2), None, 10)
