"""Plans, per-rank programs, reductions, references, profile fits and the runtime's topology helpers,
without processes."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.distributed as dist

from autoccl.adaptive.plan import RECV, SEND, Plan, PlanError, split_sizes
from autoccl.adaptive.profile import (
    ContentionFit,
    PairFit,
    Profile,
    estimate_link,
    fit_alpha_beta,
    measure_pairs,
    measured_topology,
    round_robin,
)
from autoccl.adaptive.reduce_ops import ReductionError, resolve
from autoccl.adaptive.runtime import route, route_model
from autoccl.adaptive.transport import DONE, Handle, Message
from autoccl.adaptive.verify import DTYPES, reference_reduce, valid_ops


def test_plan_from_schedule_and_json_round_trip(S, tmp_path: Path) -> None:
    t = S.generate("torus", [2, 3])
    sched, _ = S.synthesize(t, "allreduce", "1M", chunks=2, seeds=2)
    p = Plan.from_schedule(sched, t)
    assert (p.collective, p.nranks, p.nchunks, p.num_transfers) == ("allreduce", 6, 12, sched.num_transfers)
    assert p.time_us == pytest.approx(sched.time_us)
    S.save_schedule(sched, tmp_path / "s.json", t)  # the synthesizer's own file
    q = Plan.load(tmp_path / "s.json")
    assert np.array_equal(q.src, p.src) and np.array_equal(q.op, p.op) and q.owner == p.owner
    p.save(tmp_path / "p.json")
    r = Plan.load(tmp_path / "p.json")
    assert np.array_equal(r.start_us, p.start_us) and r.collective == p.collective
    # a file the synthesizer's loader accepts
    assert S.check(S.load_schedule(tmp_path / "p.json"))["ok"]


def test_untimed_baselines_are_timed_by_the_simulator(S) -> None:
    t = S.generate("ring", [4])
    b = S.baseline(t, "ring", "allgather", "1M")
    p = Plan.from_schedule(b, t)
    assert p.time_us > 0 and np.all(p.end_us > p.start_us)
    q = Plan.from_schedule(b)  # no topology: step order
    assert np.all(q.start_us >= 0)


def test_programs_follow_the_global_order(S) -> None:
    t = S.generate("mesh", [2, 2])
    p = Plan.from_schedule(S.synthesize(t, "allreduce", "1M", chunks=2)[0], t)
    order = p.issue_order().tolist()
    for rank in range(p.nranks):
        prog = p.program(rank)
        idx = [op.index for op in prog]
        assert idx == [i for i in order if rank in (p.src[i], p.dst[i])]
        for op in prog:
            assert (op.kind == SEND) == (p.src[op.index] == rank)
            if op.kind == RECV and op.reduce:
                assert not op.direct  # reductions always stage
    ag = Plan.from_schedule(S.synthesize(t, "allgather", "1M")[0], t)
    assert all(op.direct for op in ag.program(0) if op.kind == RECV)  # gathers land in place
    assert p.program(0) is p.program(0)  # cached


def test_bad_plans_are_one_sentence(S) -> None:
    t = S.generate("ring", [4])
    d = Plan.from_schedule(S.synthesize(t, "allgather", "1M")[0], t).to_dict()
    with pytest.raises(PlanError, match="not an autoccl-schedule"):
        Plan.from_dict({"format": "x"})
    for key, value, msg in (
        ("collective", "alltoall", "unknown collective"),
        ("owner", [0, 1], "owner has 2 entries"),
        ("transfers", [[0, 0, 9, 0, 1, 0, -1, 0]], "outside 0..3"),
        ("transfers", [[0, 1, 1, 0, 1, 0, -1, 0]], "to itself"),
        ("transfers", [[0, 0, 1, 0, 1, 1, -1, 0]], "cannot contain reductions"),
        ("transfers", [[0, 0]], "malformed"),
    ):
        with pytest.raises(PlanError, match=msg):
            Plan.from_dict({**d, key: value})
    with pytest.raises(PlanError, match="rank 7"):
        Plan.from_dict(d).program(7)


def test_split_sizes() -> None:
    assert (
        split_sizes(7, 3) == [3, 2, 2] and split_sizes(2, 4) == [1, 1, 0, 0] and sum(split_sizes(0, 5)) == 0
    )


def test_reduction_validation() -> None:
    assert resolve(dist.ReduceOp.SUM, torch.float32).name == "sum"
    assert resolve("avg", torch.int8).name == "avg"
    assert resolve(dist._make_nccl_premul_sum(0.25), torch.bfloat16).factor == 0.25
    for op, dtype, msg in (
        (dist.ReduceOp.MIN, torch.complex64, "not defined for complex"),
        (dist.ReduceOp.BXOR, torch.float16, "bitwise"),
        (dist.ReduceOp.AVG, torch.bool, "bool"),
        (dist._make_nccl_premul_sum(2.0), torch.int32, "floating or complex"),
        ("median", torch.float32, "unknown reduction"),
    ):
        with pytest.raises(ReductionError, match=msg):
            resolve(op, dtype)
    assert set(valid_ops(torch.bool)) == {"sum", "product", "min", "max", "band", "bor", "bxor"}
    assert "premul_sum" in valid_ops(torch.float8_e4m3fn) and "band" not in valid_ops(torch.float8_e4m3fn)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_local_combine_matches_the_reference(dtype: torch.dtype) -> None:
    """The executor's in-place combine, applied rank after rank, equals the wide-type reference."""
    from autoccl.adaptive.verify import make_input, same

    for op in valid_ops(dtype):
        xs = [make_input(dtype, 33, r, 5, exact=True) for r in range(5)]
        red = resolve(
            dist._make_nccl_premul_sum(0.5) if op == "premul_sum" else getattr(dist.ReduceOp, op.upper()),
            dtype,
        )
        acc = xs[0].clone()
        red.prepare(acc)
        for x in xs[1:]:
            y = x.clone()
            red.prepare(y)
            red.combine(acc, y)
        red.finish(acc, len(xs))
        assert same(acc, reference_reduce(xs, op), exact=True), (dtype, op)


def test_fit_alpha_beta() -> None:
    sizes = [1, 4096, 65536, 1 << 20]
    times = [5 + s / 2000 for s in sizes]  # 5 us, 2 GB/s
    a, b, ae, be = fit_alpha_beta(sizes, times)
    assert a == pytest.approx(5, abs=1e-6) and b == pytest.approx(2.0) and ae < 1e-6 and be < 1e-6
    a, b, ae, be = fit_alpha_beta([1, 1000, 2000], [50.0, 10.0, 20.0])  # noise: a falling line
    assert a == 0 and b == pytest.approx(2000 / 20 / 1e3)
    # no line, so no error bars: 0 read as exact (`autoccl profile` printed "+- 0.000 GB/s")
    assert math.isnan(ae) and math.isnan(be)
    with pytest.raises(ValueError):
        fit_alpha_beta([5, 5], [1, 2])


def test_estimate_link_keeps_a_common_lag_and_outliers_out_of_the_bandwidth() -> None:
    # 50 us, 0.0025 GB/s (2.5 bytes/us); every round trip 20 ms late, and one 3x outlier per size
    sizes = [65536, 131072, 262144]
    rtts = {s: [20_000 + 50 + s / 2.5 + k * 100.0 for k in range(5)] for s in sizes}
    for s in sizes:
        rtts[s][2] *= 3
    est = estimate_link(rtts)
    assert est.bandwidth_gbps == pytest.approx(0.0025, rel=1e-9)
    assert est.intercept_us == pytest.approx(20_000 + 50 + 300.0)  # the lag (and the medians' 300 us)
    assert est.sizes == sizes and est.samples == 15
    with pytest.raises(ValueError, match="two sizes"):
        estimate_link({65536: [1.0, 2.0]})


def test_round_robin_covers_every_pair_once() -> None:
    for n in (2, 3, 4, 7, 8):
        pairs = [p for rnd in round_robin(n) for p in rnd]
        assert sorted(pairs) == sorted((a, b) for a in range(n) for b in range(a + 1, n))
        for rnd in round_robin(n):
            ranks = [r for p in rnd for r in p]
            assert len(ranks) == len(set(ranks))


def _profile(n: int, shared: bool) -> Profile:
    pairs = [PairFit(a, b, 10.0 + a, 2.0 + b, 0.1, 0.01) for a in range(n) for b in range(n) if a != b]
    agg = 2.5 if shared else 2.0 * (n - 1)
    cont = [ContentionFit(r, agg, agg, 2.0, 2.0) for r in range(n)]
    return Profile(n, "cpu", pairs, cont)


def test_measured_topology_models(S) -> None:
    structure = {"name": "m", "npus": [f"h/cpu{r}" for r in range(4)]}
    doc, used = measured_topology(structure, _profile(4, shared=False))
    assert used == "p2p" and len(doc["links"]) == 12
    link = next(x for x in doc["links"] if x["src"] == "h/cpu1" and x["dst"] == "h/cpu3")
    assert (link["latency_us"], link["bandwidth_gbps"]) == (11.0, 5.0)
    doc, used = measured_topology(structure, _profile(4, shared=True))
    assert used == "switch" and doc["switches"] == ["h/port"]
    assert all(x["bandwidth_gbps"] == 2.5 for x in doc["links"])
    S.topology_from_dict(doc)
    two = {"name": "m", "npus": ["a/cpu0", "a/cpu1", "b/cpu0", "b/cpu1"], "dims": [2, 2]}
    prof = _profile(4, shared=True)
    prof.host_pairs = {"a->b": 1.5, "b->a": 1.25}
    doc, _ = measured_topology(two, prof)
    assert doc["nics"] == ["a/nic", "b/nic"] and doc["dims"] == [2, 2]
    links = {(x["src"], x["dst"]): x for x in doc["links"]}
    assert links[("a/nic", "network")]["bandwidth_gbps"] == 1.5
    t = S.topology_from_dict(doc)
    assert S.check(S.synthesize(t, "allreduce", "1M")[0], t)["ok"]
    with pytest.raises(ValueError, match="the profile 4"):
        measured_topology({"npus": ["x"]}, prof)


def test_route_through_switches() -> None:
    doc = {
        "npus": ["a", "b", "c"],
        "switches": ["s"],
        "links": [
            {"src": "a", "dst": "s", "latency_us": 1, "bandwidth_gbps": 10},
            {"src": "s", "dst": "b", "latency_us": 2, "bandwidth_gbps": 5},
            {"src": "a", "dst": "c", "latency_us": 1, "bandwidth_gbps": 1},
            {"src": "c", "dst": "b", "latency_us": 1, "bandwidth_gbps": 100},
        ],
    }
    assert route(doc, "a", "b") == [("a", "s"), ("s", "b")]  # NPUs are not crossed
    assert route_model(doc, "a", "b") == (3.0, 5.0)
    with pytest.raises(ValueError, match="no path"):
        route(doc, "b", "a")


class _TwoRanks:
    """Rank 0 of two; no message is ever sent (the link measurement is replaced)."""

    rank, size = 0, 2

    def issue(self, messages):  # pragma: no cover - never reached
        raise AssertionError("no transfer expected")


_TWO_RANKS_DOC = {
    "name": "two",
    "npus": ["e/r0", "e/r1"],
    "links": [
        {"src": a, "dst": b, "latency_us": 50.0, "bandwidth_gbps": 0.01}
        for a, b in (("e/r0", "e/r1"), ("e/r1", "e/r0"))
    ],
}


def _drifting_runtime(S, monkeypatch: pytest.MonkeyPatch, doc: dict | None = None, **kw):
    from autoccl.adaptive import runtime

    doc = doc if doc is not None else _TWO_RANKS_DOC
    lag, slow_gbps, probe = 20_000.0, 0.0025, 256 << 10

    def measured(t, peer, initiator, sizes, repeats, device, tag):  # the slowed link, every trip lagged
        assert (peer, initiator) == (1, True)
        out = {s: [lag + 100 + s / (slow_gbps * 1e3) + k * 50.0 for k in range(repeats)] for s in sizes}
        out[max(sizes)][0] *= 4  # an outlier
        return out

    monkeypatch.setattr(runtime, "measure_direction", measured)
    ad = runtime.Adaptive(doc, transport=_TwoRanks(), store=dist.HashStore(), probe_bytes=probe, **kw)
    events = []
    for k in range(5):  # 3 reference probes, then 2 of the slowed, lagged link
        ad.step_no += 1
        one_way = 50 + probe / (0.01 if k < 3 else slow_gbps) / 1e3 + (lag if k >= 3 else 0.0)
        probes = {"0->1": {"rtt1_us": 100.0, "rtt_us": one_way + 50.0}}
        events += ad._decide_drift([{"probes": probes}, {"probes": {}}])
    drift = [e for e in events if e.kind == "drift"]
    assert len(drift) == 1 and drift[0].detail["ratio"] > 4.5  # the lag inflated the probes' ratio
    return ad, drift[0].detail


def test_replan_measures_the_flagged_link_over_sizes(S, monkeypatch: pytest.MonkeyPatch) -> None:
    ad, drift = _drifting_runtime(S, monkeypatch)
    # the slope of the refit, not the lagged probes' ratio, sets the link: 0.0025 GB/s
    assert drift["bandwidth_gbps_after"] == pytest.approx(0.0025, rel=1e-3)
    link = next(x for x in ad.doc["links"] if (x["src"], x["dst"]) == ("e/r0", "e/r1"))
    assert link["bandwidth_gbps"] == pytest.approx(0.0025, rel=1e-3)
    assert drift["estimate"]["sizes"] == [65536, 131072, 262144] and drift["estimate"]["samples"] == 15
    assert ad.version == 1


@pytest.mark.parametrize(
    "doc",
    [
        {
            "npus": ["e/r0", "e/r1"],
            "defaults": {"latency_us": 50.0, "bandwidth_gbps": 0.01},
            "links": [{"src": "e/r0", "dst": "e/r1", "bidirectional": True}],
        },
        {"npus": ["e/r0", "e/r1"], "links": [["e/r0", "e/r1", 50.0, 0.01], ["e/r1", "e/r0", 50.0, 0.01]]},
        {"nodes": [{"name": "e/r0", "kind": "npu"}, "e/r1"], "links": _TWO_RANKS_DOC["links"]},
        {"generator": {"kind": "ring", "dims": [2], "latency_us": 50.0, "bandwidth_gbps": 0.01}},
    ],
    ids=["bidirectional-defaults", "list-links", "nodes", "generator"],
)
def test_replan_on_every_form_of_topology_file(S, monkeypatch: pytest.MonkeyPatch, doc: dict) -> None:
    """A drifted link is re-planned whichever way the file spells its links (one entry for both
    directions, defaults, lists, nodes:, a generator): the runtime edits the link it routes over."""
    ad, drift = _drifting_runtime(S, monkeypatch, doc=doc)
    assert drift["bandwidth_gbps_before"] == pytest.approx(0.01)
    assert drift["bandwidth_gbps_after"] == pytest.approx(0.0025, rel=1e-3)
    r0, r1 = (str(x) for x in ad.topo.ranks)
    bw = {(s, d): b for s, d, _, b in ad.topo.links}
    assert bw[(r0, r1)] == pytest.approx(0.0025, rel=1e-3) and bw[(r1, r0)] == pytest.approx(0.01)
    assert ad.version == 1


def test_replan_without_refit_scales_by_the_probes_ratio(S, monkeypatch: pytest.MonkeyPatch) -> None:
    _, drift = _drifting_runtime(S, monkeypatch, refit_repeats=0)
    assert drift["estimate"] is None
    assert drift["bandwidth_gbps_after"] < 0.0025 * 0.85  # the lag went into the link


def test_refit_sizes_must_differ(S) -> None:
    from autoccl.adaptive import runtime

    doc = {
        "npus": ["e/r0", "e/r1"],
        "links": [
            {"src": a, "dst": b, "latency_us": 1.0, "bandwidth_gbps": 1.0}
            for a, b in (("e/r0", "e/r1"), ("e/r1", "e/r0"))
        ],
    }
    with pytest.raises(ValueError, match="two different payload sizes"):
        runtime.Adaptive(doc, transport=_TwoRanks(), store=dist.HashStore(), refit_sizes=(1.0, 1.0))


def _latency_run(S, monkeypatch: pytest.MonkeyPatch, rtt1_after: float, **kw):
    """Link 0->1 of _TWO_RANKS_DOC (50 us, 0.01 GB/s) whose latency becomes 5,000 us after three reference
    probes, its bandwidth unchanged; the re-fit measures the same link. Returns (runtime, events, the sizes
    the re-fit timed)."""
    from autoccl.adaptive import runtime

    new_lat, back, probe = 5000.0, 50.0, 256 << 10
    asked: list[list[int]] = []

    def measured(t, peer, initiator, sizes, repeats, device, tag):
        asked.append(list(sizes))
        return {s: [new_lat + s / 10.0 + back + k * 5.0 for k in range(repeats)] for s in sizes}

    monkeypatch.setattr(runtime, "measure_direction", measured)
    ad = runtime.Adaptive(
        _TWO_RANKS_DOC, transport=_TwoRanks(), store=dist.HashStore(), probe_bytes=probe, **kw
    )
    events = []
    for k in range(5):  # 3 reference probes, then 2 with the link's new latency
        ad.step_no += 1
        lat = 50.0 if k < 3 else new_lat
        rtt1 = 100.0 if k < 3 else rtt1_after
        probes = {"0->1": {"rtt1_us": rtt1, "rtt_us": lat + probe / 10.0 + back}}
        events += ad._decide_drift([{"probes": probes}, {"probes": {}}])
    return ad, events, asked


def test_a_latency_drift_is_flagged_and_the_refit_sets_the_links_latency(S, monkeypatch) -> None:
    """With latency tracked, a link whose α grew 100-fold (its payload probes only 1.19x slower, inside the
    bandwidth rule's 1.5) is flagged from its one-byte round trips; the re-fit, one-byte ping-pongs included,
    gives the link half the round trip's new fixed part as its latency and keeps its bandwidth."""
    ad, events, asked = _latency_run(S, monkeypatch, rtt1_after=5050.0, latency_drift_us=1000.0)
    drift = [e.detail for e in events if e.kind == "drift"]
    assert len(drift) == 1 and drift[0]["pair"] == "0->1"
    assert drift[0]["ratio"] is None  # the bandwidth rule did not fire
    assert drift[0]["latency_ratio"] == pytest.approx(50.5)
    assert drift[0]["latency_us_before"] == pytest.approx(50.0)
    # half the round trip's fixed part (5,000 + 50 us, the median repeat's 10): a ping-pong goes both ways
    assert drift[0]["latency_us_after"] == pytest.approx(2530.0)
    assert drift[0]["bandwidth_gbps_after"] == pytest.approx(0.01, rel=1e-3)
    assert asked == [[1, 65536, 131072, 262144]]
    lat = {(x["src"], x["dst"]): x["latency_us"] for x in ad.doc["links"]}
    assert lat[("e/r0", "e/r1")] == pytest.approx(2530.0) and lat[("e/r1", "e/r0")] == 50.0
    assert ad.version == 1 and [e.kind for e in events] == ["drift", "replan"]
    assert events[1].detail["pairs"] == ["0->1"]  # the re-plan names the pair its latency flagged


def test_latency_is_not_tracked_by_default_nor_flagged_within_its_floor(S, monkeypatch) -> None:
    """Off by default: the same drift changes nothing. On, a one-byte round trip 4x its reference but only
    300 us above it stays below a floor of 1,000 us: host noise of that size flags nothing."""
    ad, events, asked = _latency_run(S, monkeypatch, rtt1_after=5050.0)
    assert events == [] and asked == [] and ad.version == 0
    _, events, asked = _latency_run(S, monkeypatch, rtt1_after=400.0, latency_drift_us=1000.0)
    assert events == [] and asked == []


def test_a_latency_drift_without_refit_scales_the_latency_by_the_probes_ratio(S, monkeypatch) -> None:
    _, events, asked = _latency_run(S, monkeypatch, rtt1_after=5050.0, latency_drift_us=0.0, refit_repeats=0)
    drift = next(e.detail for e in events if e.kind == "drift")
    assert asked == [] and drift["estimate"] is None
    assert drift["latency_us_after"] == pytest.approx(50.0 * 50.5)
    assert drift["bandwidth_gbps_after"] == pytest.approx(0.01)  # no bandwidth drift, nothing scaled


def test_latency_drift_floor_must_not_be_negative(S) -> None:
    from autoccl.adaptive import runtime

    with pytest.raises(ValueError, match="latency_drift_us must be 0 or more"):
        runtime.Adaptive(_TWO_RANKS_DOC, transport=_TwoRanks(), store=dist.HashStore(), latency_drift_us=-1.0)


class _RecordingTransport:
    """A transport that completes every message at once and keeps each batch: what a rank asked for."""

    symmetric_first_exchange = True  # as an NCCL transport asks

    def __init__(self, rank: int, size: int) -> None:
        self.rank, self.size = rank, size
        self.batches: list[list[tuple[int, int, int]]] = []  # per batch: (kind, peer, tag) of each message

    def issue(self, messages: list[Message]) -> list[Handle]:
        self.batches.append([(m.kind, m.peer, m.tag) for m in messages])
        return [DONE] * len(messages)


@pytest.mark.parametrize("n", [2, 3, 4])
def test_profile_meets_every_peer_first_with_a_send_and_a_receive(n: int) -> None:
    # A ping-pong's batches are lopsided (send + receive on the initiator, a receive on the responder); NCCL
    # failed to set a pair up from such a first batch. Every rank's first batch with a peer must hold both.
    for rank in range(n):
        t = _RecordingTransport(rank, n)
        for concurrent in (False, True):
            measure_pairs(t, [1024, 4096], 2, "cpu", lambda: None, concurrent=concurrent)
        first: dict[int, list[tuple[int, int, int]]] = {}
        for batch in t.batches:
            for _, peer, _ in batch:
                first.setdefault(peer, batch)
        assert sorted(first) == [p for p in range(n) if p != rank]
        for peer, batch in first.items():
            kinds = {(kind, p) for kind, p, _ in batch}
            assert kinds == {(SEND, peer), (RECV, peer)}, (rank, peer, batch)
            # met once: the first exchange's messages are not repeated before later ping-pongs
            assert sum(b == batch for b in t.batches) == 1, (rank, peer)
        assert any(len(b) == 1 for b in t.batches)  # the ping-pongs themselves stay lopsided


class _FourRanks:
    """Rank 0 of four; no message is ever sent."""

    rank, size = 0, 4

    def issue(self, messages):  # pragma: no cover - never reached
        raise AssertionError("no transfer expected")


def test_pairs_the_model_does_not_join_are_not_probed_nor_blamed(S) -> None:
    """On a 2x2 torus ranks 0 and 3 share no link: their probes measured a path the model has no link for, and
    a drift flagged on them crashed the re-plan ("no path from npu0 to npu3"). They are not probed, and
    another rank's probe of such a pair is left out of the drift decision."""
    from autoccl.adaptive import runtime
    from autoccl.adaptive.jobs import generated_doc

    ad = runtime.Adaptive(
        generated_doc("torus:2x2"), transport=_FourRanks(), store=dist.HashStore(), refit_repeats=0
    )
    probed = {p for rnd in ad._rounds for p in rnd}
    assert probed == {(0, 1), (0, 2), (1, 3), (2, 3)}, probed
    events = []
    for k in range(6):  # 3 reference probes, then slow ones
        ad.step_no += 1
        rtt = 100.0 if k < 3 else 1000.0
        probes = {"0->3": {"rtt1_us": 10.0, "rtt_us": rtt}, "0->1": {"rtt1_us": 10.0, "rtt_us": rtt}}
        events += ad._decide_drift([{"probes": probes}, {"probes": {}}, {"probes": {}}, {"probes": {}}])
    assert [e.detail["pair"] for e in events if e.kind == "drift"] == ["0->1"]


def test_plan_and_native_are_judged_per_dtype_and_reduction(S, monkeypatch: pytest.MonkeyPatch) -> None:
    """A native all-reduce that fails for one dtype and reduction (gloo's integer AVG) leaves the plan without
    a competitor there only: another dtype or reduction of the same size still times the native. The record
    was kept per size, so one failure took the comparison from every call of that size."""
    from autoccl.adaptive import runtime

    def native(x: torch.Tensor, op: object) -> None:
        if not x.is_floating_point() and op == dist.ReduceOp.AVG:
            raise RuntimeError("Cannot use ReduceOp.AVG with non-floating point tensors")

    monkeypatch.setattr(runtime.C, "all_reduce", lambda *a, **k: None)  # the plan's transfers: none here
    ad = runtime.Adaptive(
        _TWO_RANKS_DOC, transport=_TwoRanks(), store=dist.HashStore(), native={"allreduce": native}
    )
    ints, floats = torch.ones(4, dtype=torch.int32), torch.ones(4, dtype=torch.float32)
    ran = [ad.all_reduce(ints, dist.ReduceOp.AVG) for _ in range(4)]
    assert set(ran) == {"plan"}, ran
    ran = [ad.all_reduce(floats, dist.ReduceOp.SUM) for _ in range(4)]
    assert ran.count("native") == 2, ran  # every other call, as in any evaluation
    assert sorted(k[3] for k in ad.evals) == ["float32/sum", "int32/avg"]
