"""`autoccl profile`: measure every link of the job's machine and write the measured topology.

Every ordered pair of ranks (a, b) is timed with ping-pongs over the job's own point-to-point transport (NCCL
on GPUs, gloo on CPUs): a sends S bytes, b answers with one byte; the fastest of several repeats is kept
(interference only adds time). A least-squares line through the round trips of several sizes gives the
pair's bandwidth beta (1 / slope) and latency alpha (half the intercept: the answer costs about one
latency), with standard errors.

Contention: each rank then sends to all other ranks at once (fan-out) and receives from all at once
(fan-in). If the aggregate is no more than `SHARED_RATIO` times one pair's bandwidth, the rank's links share
a port (an NVSwitch port, a NIC, the CPU of a loopback rank): the host is modelled as a shared-port switch
with per-rank up and down links of the measured aggregate bandwidths. Otherwise the pairs are independent
and each gets its own measured link. Across hosts, each host gets a NIC node whose bandwidth is the measured
aggregate of all its ranks sending to another host at once.

The measured topology is an ordinary topology file (autoccl synth -t, autoccl.synth.load_topology).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from autoccl.adaptive.transport import RECV, SEND, Message, Transport, connect_peers

SHARED_RATIO = 1.5
_TAG = 1 << 20  # profile messages' tags, apart from plans' transfer indices


@dataclass
class PairFit:
    src: int
    dst: int
    latency_us: float
    bandwidth_gbps: float
    latency_err_us: float
    bandwidth_err_gbps: float
    sizes: list[int] = field(default_factory=list)
    times_us: list[float] = field(default_factory=list)  # one-way, fastest of the repeats
    # False: the times fit no line (a slope of 0 or less): bandwidth_gbps is the largest size over its time,
    # a lower bound, latency_us 0, and both errors unknown (NaN; null in the report)
    fitted: bool = True


@dataclass
class ContentionFit:
    rank: int
    out_gbps: float  # aggregate when sending to every other rank at once
    in_gbps: float
    pair_out_gbps: float  # mean single-pair bandwidth out of the rank
    pair_in_gbps: float

    @property
    def shared(self) -> bool:
        return bool(self.out_gbps <= SHARED_RATIO * self.pair_out_gbps)


@dataclass
class Profile:
    nranks: int
    device: str
    pairs: list[PairFit]
    contention: list[ContentionFit]
    host_pairs: dict[str, float] = field(default_factory=dict)  # "hostA->hostB": aggregate GB/s

    def to_dict(self) -> dict[str, Any]:
        return {
            "nranks": self.nranks,
            "device": self.device,
            "pairs": [asdict(p) for p in self.pairs],
            "contention": [asdict(c) | {"shared": c.shared} for c in self.contention],
            "host_pairs": self.host_pairs,
        }

    def pair(self, a: int, b: int) -> PairFit:
        for p in self.pairs:
            if p.src == a and p.dst == b:
                return p
        raise KeyError((a, b))


def fit_alpha_beta(sizes: Sequence[float], times_us: Sequence[float]) -> tuple[float, float, float, float]:
    """Least-squares t = alpha + S / beta. Returns (alpha_us, beta_gbps, alpha_err_us, beta_err_gbps),
    beta in GB/s (= bytes per microsecond / 1e3). When noise makes the slope non-positive, beta falls back
    to the largest size over its time (alpha = 0), a lower bound of the link's bandwidth, and the errors are
    NaN: not measured, where 0 read as exact. Two points give no errors either (NaN)."""
    x = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(times_us, dtype=np.float64)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("a fit needs at least two different sizes")
    if np.any(~np.isfinite(y)) or np.any(y <= 0):
        raise ValueError("times must be positive and finite")
    from scipy import stats

    r = stats.linregress(x, y)
    slope, intercept = float(r.slope), float(r.intercept)
    big = int(np.argmax(x))
    floor = float(x[big] / y[big])  # bytes/us with no latency: the slowest the link can be
    if slope <= 0 or 1.0 / slope > 1e3 * floor * 50:
        return 0.0, floor / 1e3, math.nan, math.nan
    alpha = max(intercept, 0.0)
    beta = 1.0 / slope / 1e3
    beta_err = float(r.stderr) / slope**2 / 1e3 if len(x) > 2 else math.nan
    alpha_err = float(r.intercept_stderr) if len(x) > 2 else math.nan
    return alpha, beta, alpha_err, beta_err


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _wait(handles: Sequence[Any]) -> None:
    for h in handles:
        h.wait()


def pingpong(
    t: Transport, peer: int, initiator: bool, buf: torch.Tensor, ack: torch.Tensor, nbytes: int, tag: int
) -> float:
    """One ping-pong of nbytes between this rank and peer; returns the round trip in us on the initiator
    (0 on the responder)."""
    connect_peers(t, [peer], buf.device)  # a ping-pong's batches are lopsided
    if initiator:
        _sync(str(buf.device.type))
        t0 = time.perf_counter()
        _wait(t.issue([Message(SEND, buf[:nbytes], peer, tag), Message(RECV, ack, peer, tag + 1)]))
        _sync(str(buf.device.type))
        return (time.perf_counter() - t0) * 1e6
    _wait(t.issue([Message(RECV, buf[:nbytes], peer, tag)]))
    _wait(t.issue([Message(SEND, ack, peer, tag + 1)]))
    return 0.0


def measure_direction(
    t: Transport,
    peer: int,
    initiator: bool,
    sizes: Sequence[int],
    repeats: int,
    device: str,
    tag: int = _TAG + 6,
) -> dict[int, list[float]]:
    """Ping-pongs of each size from the initiator to peer, `repeats` of each after one warm-up, the sizes
    interleaved (a burst of interference then touches every size alike). Collective over the two ranks.
    Returns every round trip in us by size on the initiator ({} on the responder)."""
    big = max(sizes)
    buf = torch.zeros(big, dtype=torch.uint8, device=device)
    ack = torch.zeros(1, dtype=torch.uint8, device=device)
    pingpong(t, peer, initiator, buf, ack, min(sizes), tag)  # warm-up
    out: dict[int, list[float]] = {int(s): [] for s in sizes}
    for _ in range(repeats):
        for s in sizes:
            dt = pingpong(t, peer, initiator, buf, ack, int(s), tag)
            if initiator:
                out[int(s)].append(dt)
    return out if initiator else {}


@dataclass
class LinkEstimate:
    """A link's bandwidth from ping-pongs of several payload sizes: the slope of the per-size median round
    trips. What every ping-pong pays alike (the answer, wake-up and scheduling lags) lands in the
    intercept, not in the bandwidth; an outlier moves a median, not the fit. Payload sizes only: one-byte
    round trips lag unlike payloads on a loaded host and would tilt the line."""

    bandwidth_gbps: float
    intercept_us: float
    sizes: list[int]
    median_rtt_us: list[float]
    samples: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def estimate_link(rtts: dict[int, Sequence[float]]) -> LinkEstimate:
    """The bandwidth of a link from its payload round trips {size: [us, ...]} (at least two sizes)."""
    sizes = sorted(s for s in rtts if rtts[s])
    if len(sizes) < 2:
        raise ValueError("a link estimate needs round trips of at least two sizes")
    med = [float(statistics.median(rtts[s])) for s in sizes]
    alpha, beta, _, _ = fit_alpha_beta(sizes, med)
    return LinkEstimate(beta, alpha, sizes, med, sum(len(rtts[s]) for s in sizes))


def round_robin(n: int) -> list[list[tuple[int, int]]]:
    """Rounds of disjoint pairs covering every unordered pair once (circle method)."""
    ids = list(range(n)) + ([-1] if n % 2 else [])
    m = len(ids)
    rounds = []
    for _ in range(m - 1):
        pairs = [(ids[i], ids[m - 1 - i]) for i in range(m // 2)]
        rounds.append([(min(a, b), max(a, b)) for a, b in pairs if a >= 0 and b >= 0])
        ids = [ids[0], ids[-1], *ids[1:-1]]
    return rounds


def measure_pairs(
    t: Transport,
    sizes: Sequence[int],
    repeats: int,
    device: str,
    barrier: Callable[[], None],
    concurrent: bool,
) -> list[dict[str, Any]]:
    """This rank's measurements as initiator: [{dst, sizes, rtt (fastest per size, us), rtt1 (one byte)}]."""
    rank, n = t.rank, t.size
    big = max(sizes)
    buf = torch.zeros(big, dtype=torch.uint8, device=device)
    ack = torch.zeros(1, dtype=torch.uint8, device=device)
    rounds = round_robin(n) if concurrent else [[p] for rnd in round_robin(n) for p in rnd]
    mine: list[dict[str, Any]] = []
    for rnd in rounds:
        for a, b in rnd:
            if rank not in (a, b):
                continue
            peer = b if rank == a else a
            # The two directions take turns size by size: whatever drifts while the pair is measured (clocks
            # leaving idle, another process) touches both alike. On 2 x H200 the direction measured wholly
            # first read 0.91x the other's bandwidth where CUDA peer copies were alike both ways. Within a
            # turn the responder posts its next receive as soon as it has answered; the turn's first
            # ping-pong, which waits for the roles to change, is a warm-up.
            best: dict[int, dict[int, float]] = {a: {}, b: {}}
            for s in [1, *sizes]:
                for initiator_rank in (a, b):
                    for k in range((3 if s <= 65536 else 1) * repeats + 1):  # small ones are cheap and noisy
                        dt = pingpong(t, peer, rank == initiator_rank, buf, ack, s, _TAG)
                        if k and rank == initiator_rank:
                            # the fastest repeat: interference (other processes, a shared CPU) only adds time
                            best[initiator_rank][s] = min(best[initiator_rank].get(s, math.inf), dt)
            rtts = best[rank]
            mine.append({"dst": peer, "sizes": list(sizes), "rtt": [rtts[s] for s in sizes], "rtt1": rtts[1]})
        barrier()
    return mine


def measure_fan(
    t: Transport, nbytes: int, repeats: int, device: str, barrier: Callable[[], None]
) -> tuple[float, float]:
    """(fan-out us, fan-in us) of this rank: nbytes to (from) every other rank at once, fastest repeat;
    the others answer with one byte once they have everything."""
    rank, n = t.rank, t.size
    bufs = [torch.zeros(nbytes, dtype=torch.uint8, device=device) for _ in range(n)]
    ack = torch.zeros(1, dtype=torch.uint8, device=device)
    res = [0.0, 0.0]
    for leader in range(n):
        for phase in (0, 1):  # 0: leader sends to all; 1: all send to the leader
            vals = []
            for k in range(repeats + 1):
                barrier()
                if rank == leader:
                    others = [p for p in range(n) if p != rank]
                    kind = SEND if phase == 0 else RECV
                    _sync(device)
                    t0 = time.perf_counter()
                    msgs = [Message(kind, bufs[p], p, _TAG + 2) for p in others]
                    if phase == 0:
                        msgs += [Message(RECV, ack.clone(), p, _TAG + 3) for p in others]
                    _wait(t.issue(msgs))
                    _sync(device)
                    if k:
                        vals.append((time.perf_counter() - t0) * 1e6)
                elif phase == 0:
                    _wait(t.issue([Message(RECV, bufs[leader], leader, _TAG + 2)]))
                    _wait(t.issue([Message(SEND, ack, leader, _TAG + 3)]))
                else:
                    _wait(t.issue([Message(SEND, bufs[leader], leader, _TAG + 2)]))
            if rank == leader:
                res[phase] = min(vals)
    return res[0], res[1]


def run_profile(
    t: Transport,
    device: str,
    sizes: Sequence[int],
    repeats: int = 5,
    concurrent: bool = False,
    fan_bytes: int | None = None,
    gather: Callable[[Any], list[Any]] | None = None,
    barrier: Callable[[], None] | None = None,
    hosts: Sequence[str] | None = None,
) -> Profile:
    """Measure every ordered pair and every rank's fan-out/fan-in; collective over all ranks of `t`.
    gather(obj) must return every rank's obj (default: torch.distributed.all_gather_object)."""
    import torch.distributed as dist

    if gather is None:

        def gather(obj: Any) -> list[Any]:
            out: list[Any] = [None] * t.size
            dist.all_gather_object(out, obj)
            return out

    if barrier is None:
        barrier = dist.barrier
    n = t.size
    sizes = sorted(set(int(s) for s in sizes))
    if len(sizes) < 2:
        raise ValueError("profile needs at least two message sizes")
    raw = measure_pairs(t, sizes, repeats, device, barrier, concurrent)
    fan = measure_fan(t, fan_bytes or max(sizes), repeats, device, barrier) if n > 2 else (0.0, 0.0)
    host_agg = _measure_hosts(t, hosts, fan_bytes or max(sizes), repeats, device, barrier) if hosts else {}
    everything = gather({"rank": t.rank, "pairs": raw, "fan": fan, "hosts": host_agg})
    pairs: list[PairFit] = []
    for rep in everything:
        for m in rep["pairs"]:
            # round trip = alpha(a->b) + S/beta(a->b) + the one-byte answer (about alpha(b->a)): the slope is
            # the pair's bandwidth, half the intercept its latency
            rtt2, b, ae, be = fit_alpha_beta([1, *m["sizes"]], [m["rtt1"], *m["rtt"]])
            one_way = [max(r - rtt2 / 2, 1e-3) for r in m["rtt"]]
            fitted = not math.isnan(be)  # three points or more: NaN only where no line fits
            pairs.append(
                PairFit(rep["rank"], m["dst"], rtt2 / 2, b, ae / 2, be, m["sizes"], one_way, fitted=fitted)
            )
    pairs.sort(key=lambda p: (p.src, p.dst))
    contention: list[ContentionFit] = []
    fb = fan_bytes or max(sizes)
    if n > 2:
        for rep in everything:
            r = rep["rank"]
            outs = [p for p in pairs if p.src == r]
            ins = [p for p in pairs if p.dst == r]
            lat_out = statistics.mean(p.latency_us for p in outs)
            lat_in = statistics.mean(p.latency_us for p in ins)
            fan_out, fan_in = rep["fan"]
            out_gbps = (n - 1) * fb / max(fan_out - lat_out, 1e-3) / 1e3
            in_gbps = (n - 1) * fb / max(fan_in - lat_in, 1e-3) / 1e3
            contention.append(
                ContentionFit(
                    r,
                    float(out_gbps),
                    float(in_gbps),
                    float(statistics.mean(p.bandwidth_gbps for p in outs)),
                    float(statistics.mean(p.bandwidth_gbps for p in ins)),
                )
            )
    host_pairs: dict[str, float] = {}
    for rep in everything:
        host_pairs.update(rep["hosts"])
    return Profile(n, device, pairs, contention, host_pairs)


def _measure_hosts(
    t: Transport, hosts: Sequence[str], nbytes: int, repeats: int, device: str, barrier: Callable[[], None]
) -> dict[str, float]:
    """Aggregate host-to-host bandwidth: every rank of host A sends nbytes to its counterpart on host B
    (ranks paired in order) at once; the fastest repeat. Returned by the first rank of A: {"A->B": GB/s}."""
    names = list(dict.fromkeys(hosts))
    out: dict[str, float] = {}
    buf = torch.zeros(nbytes, dtype=torch.uint8, device=device)
    ack = torch.zeros(1, dtype=torch.uint8, device=device)
    for ha in names:
        for hb in names:
            if ha == hb:
                continue
            ra = [r for r, h in enumerate(hosts) if h == ha]
            rb = [r for r, h in enumerate(hosts) if h == hb]
            pairs = list(zip(ra, rb, strict=False))
            vals = []
            for k in range(repeats + 1):
                barrier()
                t0 = time.perf_counter()
                for a, b in pairs:
                    if t.rank == a:
                        _wait(t.issue([Message(SEND, buf, b, _TAG + 4), Message(RECV, ack, b, _TAG + 5)]))
                    elif t.rank == b:
                        _wait(t.issue([Message(RECV, buf, a, _TAG + 4)]))
                        _wait(t.issue([Message(SEND, ack, a, _TAG + 5)]))
                _sync(device)
                dt = (time.perf_counter() - t0) * 1e6
                barrier()
                if k:
                    vals.append(dt)
            if pairs and t.rank == pairs[0][0]:
                out[f"{ha}->{hb}"] = len(pairs) * nbytes / min(vals) / 1e3
    return out


def measured_topology(
    structure: dict[str, Any], prof: Profile, model: str = "auto"
) -> tuple[dict[str, Any], str]:
    """The detected topology `structure` (autoccl.adaptive.detect) with measured links.

    model "p2p": every ordered pair of ranks of a host is its own link (alpha, beta measured);
    "switch": each host is a shared-port switch with per-rank up/down links (fan-out / fan-in aggregates,
    latency half the median pair latency);
    "auto": "switch" where the contention test says the host's ranks share a port, else "p2p".
    Returns (document, the model used)."""
    npus: list[str] = list(structure["npus"])
    n = len(npus)
    if n != prof.nranks:
        raise ValueError(f"the topology has {n} ranks, the profile {prof.nranks}")
    host_of = [name.rsplit("/", 1)[0] if "/" in name else "host" for name in npus]
    hosts = list(dict.fromkeys(host_of))
    cont = {c.rank: c for c in prof.contention}
    used = model
    if model == "auto":
        shared = [c.shared for c in prof.contention]
        used = "switch" if shared and sum(shared) * 2 > len(shared) else "p2p"
    if used not in ("p2p", "switch"):
        raise ValueError(f"unknown link model {model!r}: p2p, switch or auto")
    doc: dict[str, Any] = {
        "name": f"{structure.get('name', 'machine')}-measured",
        "description": f"measured by autoccl profile ({prof.device}, {used} model within hosts)",
        "npus": npus,
        "switches": [],
        "nics": [],
        "links": [],
    }
    links: list[dict[str, Any]] = doc["links"]

    def add(s: str, d: str, lat: float, bw: float) -> None:
        links.append(
            {"src": s, "dst": d, "latency_us": round(max(lat, 0.0), 4), "bandwidth_gbps": round(bw, 6)}
        )

    for host in hosts:
        ranks = [r for r in range(n) if host_of[r] == host]
        if len(ranks) < 2:
            continue
        if used == "p2p" or not cont:
            for a in ranks:
                for b in ranks:
                    if a != b:
                        p = prof.pair(a, b)
                        add(npus[a], npus[b], p.latency_us, p.bandwidth_gbps)
        else:
            sw = f"{host}/port"
            doc["switches"].append(sw)
            for r in ranks:
                outs = [prof.pair(r, q) for q in ranks if q != r]
                ins = [prof.pair(q, r) for q in ranks if q != r]
                c = cont.get(r)
                # a shared port carries what the rank moved to (from) everyone at once
                up = c.out_gbps if c else statistics.median(p.bandwidth_gbps for p in outs)
                down = c.in_gbps if c else statistics.median(p.bandwidth_gbps for p in ins)
                add(npus[r], sw, statistics.median(p.latency_us for p in outs) / 2, up)
                add(sw, npus[r], statistics.median(p.latency_us for p in ins) / 2, down)
    if len(hosts) > 1:
        doc["switches"].append("network")
        for host in hosts:
            nic = f"{host}/nic"
            doc["nics"].append(nic)
            ranks = [r for r in range(n) if host_of[r] == host]
            remote = [r for r in range(n) if host_of[r] != host]
            outs = [prof.pair(a, b) for a in ranks for b in remote]
            ins = [prof.pair(b, a) for a in ranks for b in remote]
            lat_out = statistics.median(p.latency_us for p in outs)
            lat_in = statistics.median(p.latency_us for p in ins)
            agg_out = max(
                [v for k, v in prof.host_pairs.items() if k.startswith(f"{host}->")]
                or [max(p.bandwidth_gbps for p in outs)]
            )
            agg_in = max(
                [v for k, v in prof.host_pairs.items() if k.endswith(f"->{host}")]
                or [max(p.bandwidth_gbps for p in ins)]
            )
            for r in ranks:
                r_out = max(prof.pair(r, b).bandwidth_gbps for b in remote)
                r_in = max(prof.pair(b, r).bandwidth_gbps for b in remote)
                add(npus[r], nic, lat_out / 4, r_out)
                add(nic, npus[r], lat_in / 4, r_in)
            add(nic, "network", lat_out / 4, agg_out)
            add("network", nic, lat_in / 4, agg_in)
    if not doc["switches"]:
        del doc["switches"]
    if not doc["nics"]:
        del doc["nics"]
    if "dims" in structure:
        doc["dims"] = structure["dims"]
    return doc, used
