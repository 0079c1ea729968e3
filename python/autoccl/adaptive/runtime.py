"""Adaptive collectives in a training job: synthesized plans from the measured topology, probes between
iterations, re-planning on drift, and a fall-back to the backend's own collective.

    ad = Adaptive("measured.yaml")          # the topology `autoccl profile` wrote
    model.register_comm_hook(ad, ddp_comm_hook)
    for batch in data:
        ...; loss.backward(); opt.step()
        ad.step()                          # the iteration boundary

* Plans: one per (collective, size, root), synthesized by rank 0 from the current topology and handed to
  the other ranks through the job's store, so every rank runs the same schedule.
* Probes (`step()`): one round of disjoint rank pairs (round robin: every pair every n-1 steps) ping-pongs
  one byte and `probe_bytes` in both directions (fastest of `probe_repeats`); a one-way time is the payload's
  round trip less half the fastest one-byte round trip the pair has shown. The fastest of a pair's first
  `baseline_probes` one-way times of `probe_bytes` is its reference; a later probe off it by more than
  `drift_ratio` (either way) on `confirm` consecutive probes flags the pair, at the fastest of those
  probes' ratios (as for the reference, interference only adds time). Comparing a pair with its own
  history, not with the profile's model, keeps the probe's method out of the verdict.
* Latency (opt-in, `latency_drift_us`): the pair's fastest one-byte round trip of a probe against the fastest
  of its first `baseline_probes` ones; off by more than `drift_ratio` (either way) and by more than
  `latency_drift_us` on `confirm` consecutive probes flags the pair too, and every re-fit then also sets the
  link's latency α. Off by default: from ping-pongs alone a host's own lag (wake-up, scheduling, a loaded
  core) cannot be told from the link's, and it would land in α.
* Agreement: at every step each rank writes its probe results and its timing of plans under evaluation to
  the store, then reads every rank's; all ranks take the same decisions from the same data, at the same step.
* Re-planning: the flagged direction is measured afresh (ping-pongs of `refit_sizes` x probe_bytes,
  `refit_repeats` each) and the link gets the slope of the per-size median round trips as its bandwidth
  (the direct link; on a switch path, the sender's port): a lag that every ping-pong pays alike goes
  into the intercept, not into the link, as it did when the link was scaled by the probes' ratio (still
  the rule with refit_repeats=0). With latency tracked, the re-fit also times one-byte ping-pongs, and half
  the intercept of the line over them and the payloads becomes the link's latency, as `autoccl profile`
  takes it (without a re-fit: its latency scaled by the one-byte probes' ratio). A ping-pong crosses both
  directions, so it cannot tell which one's latency moved: a drift of one direction's is shared by the two
  where both are flagged, and halved where only one is. The topology version increases and the next call of
  each collective uses a plan synthesized from the new topology.
* Fall-back: the first `eval_calls` x 2 calls of each new plan alternate between the plan and the backend's
  collective (`native`); at the next step the slower of the two (by the slowest rank's mean) is dropped.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autoccl.adaptive import collectives as C
from autoccl.adaptive.plan import Plan
from autoccl.adaptive.profile import (
    LinkEstimate,
    estimate_link,
    fit_alpha_beta,
    measure_direction,
    pingpong,
    round_robin,
)
from autoccl.adaptive.reduce_ops import ReductionError, resolve
from autoccl.adaptive.transport import TorchTransport, Transport

_PROBE_TAG = (1 << 20) + 64
_REFIT_TAG = (1 << 20) + 72
NativeFn = Callable[..., Any]


def default_store() -> Any:
    """The job's store (the one init_process_group rendezvoused through)."""
    from torch.distributed import distributed_c10d

    return distributed_c10d._get_default_store()


def _variant(dtype: torch.dtype, op: Any) -> str:
    """The dtype and reduction of a call as every rank names them ("float32", "int32/avg"): part of the key
    plans are judged by, exchanged through the store, so no object's repr (an address) may be in it."""
    name = str(dtype).removeprefix("torch.")
    if op is None:
        return name
    try:
        return f"{name}/{resolve(op, dtype).name}"
    except ReductionError:  # a reduction the plan refuses: named all the same, the plan's error comes later
        return f"{name}/{getattr(op, 'name', type(op).__name__)}"


def load_topology_doc(topology: dict[str, Any] | str | Path) -> dict[str, Any]:
    if isinstance(topology, dict):
        return json.loads(json.dumps(topology))
    import yaml

    p = Path(topology)
    text = p.read_text()
    return dict(json.loads(text) if p.suffix == ".json" else yaml.safe_load(text))


def explicit_document(topo: Any) -> dict[str, Any]:
    """A built topology as a document whose every directed link is spelled out with its latency and
    bandwidth, and whose NPUs are listed under `npus`: what `route` and the runtime's link edits read. A
    topology file may say less (`bidirectional`, `defaults`, links as lists, `nodes:`, `generator:`,
    `failed:`); the built topology has resolved all of it, in the same node order (the same ranks)."""
    lists: dict[str, list[str]] = {"npus": [], "switches": [], "nics": []}
    key = {"npu": "npus", "switch": "switches", "nic": "nics"}
    for name, kind in topo.nodes:
        lists[key[str(kind)]].append(str(name))
    doc: dict[str, Any] = {"name": str(topo.name), **lists}
    doc["links"] = [
        {"src": str(s), "dst": str(d), "latency_us": float(lat), "bandwidth_gbps": float(bw)}
        for s, d, lat, bw in topo.links
    ]
    if list(topo.dims):
        doc["dims"] = [int(x) for x in topo.dims]
    return doc


def route(doc: dict[str, Any], src: str, dst: str) -> list[tuple[str, str]]:
    """The links of the cheapest path src -> dst that crosses only switches and NICs (fewest hops, then
    lowest latency): how the synthesizer joins two NPUs without a direct link."""
    npus = set(doc.get("npus", []))
    out: dict[str, list[tuple[str, float]]] = {}
    for link in doc["links"]:
        out.setdefault(link["src"], []).append((link["dst"], float(link["latency_us"])))
    best: dict[str, tuple[int, float, list[tuple[str, str]]]] = {src: (0, 0.0, [])}
    frontier = [src]
    while frontier:
        nxt = []
        for node in frontier:
            hops, lat, path = best[node]
            for d, link_lat in out.get(node, []):
                if d != dst and d in npus:
                    continue
                cand = (hops + 1, lat + link_lat, [*path, (node, d)])
                if d not in best or cand[:2] < best[d][:2]:
                    best[d] = cand
                    if d != dst:
                        nxt.append(d)
        frontier = nxt
    if dst not in best:
        raise ValueError(f"no path from {src} to {dst} in the topology")
    return best[dst][2]


def route_model(doc: dict[str, Any], src: str, dst: str) -> tuple[float, float]:
    """(latency us, bandwidth GB/s) of the path src -> dst: latencies add, the narrowest link decides."""
    links = {(x["src"], x["dst"]): x for x in doc["links"]}
    hops = route(doc, src, dst)
    return (
        sum(float(links[h]["latency_us"]) for h in hops),
        min(float(links[h]["bandwidth_gbps"]) for h in hops),
    )


# group (its global ranks) -> Adaptive objects made on it in this process
_MADE_ON: dict[str, int] = {}


def _instance_scope(group: Any, t: Transport) -> str:
    """The store scope of a new Adaptive: its group's global ranks and its number among the Adaptive objects
    made on that group. Every rank of a group makes its Adaptive objects in the same order, so the ranks
    agree on it; two objects (a re-made one, or one per subgroup) never read each other's plans or steps."""
    g = group if group is not None else getattr(t, "connection_key", None)
    try:
        ranks = ",".join(str(r) for r in dist.get_process_group_ranks(g)) if g is not None else "all"
    except (AttributeError, RuntimeError, TypeError, ValueError):  # no process group (a test's transport)
        ranks = "all"
    n = _MADE_ON.get(ranks, 0)
    _MADE_ON[ranks] = n + 1
    return f"{ranks}/{n}"


@dataclass
class Event:
    step: int
    kind: str  # drift | replan | choice
    detail: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "kind": self.kind, **self.detail}


class Adaptive:
    """Collectives from synthesized plans, re-planned when the links drift. See the module doc."""

    def __init__(
        self,
        topology: dict[str, Any] | str | Path,
        *,
        group: Any = None,
        store: Any = None,
        transport: Transport | None = None,
        chunks: int = 1,
        seeds: int = 4,
        probe_bytes: int = 256 << 10,
        probe: bool = True,
        drift_ratio: float = 1.5,
        confirm: int = 2,
        baseline_probes: int = 3,
        probe_repeats: int = 3,
        eval_calls: int = 3,
        refit_sizes: tuple[float, ...] = (0.25, 0.5, 1.0),
        refit_repeats: int = 5,
        latency_drift_us: float | None = None,
        native: dict[str, NativeFn] | None = None,
        prefix: str = "autoccl/adaptive",
    ) -> None:
        from autoccl.synth import topology_from_dict

        self.group = group
        self.t = transport if transport is not None else TorchTransport(group)
        self.rank, self.size = self.t.rank, self.t.size
        base = store if store is not None else default_store()
        self.store = dist.PrefixStore(f"{prefix}/{_instance_scope(group, self.t)}", base)
        given = load_topology_doc(topology)
        self.topo = topology_from_dict(given, source="adaptive topology")
        self.doc = explicit_document(self.topo)  # every link spelled out: re-planning edits links
        if int(self.topo.num_npus) != self.size:
            raise ValueError(
                f"the topology has {self.topo.num_npus} NPUs but the process group has {self.size} ranks"
            )
        self.npus: list[str] = list(self.topo.ranks)
        self.chunks, self.seeds = chunks, seeds
        self.probe_bytes, self.probing = probe_bytes, probe
        self.drift_ratio, self.confirm, self.eval_calls = drift_ratio, confirm, eval_calls
        self.native = dict(native or {})
        self.version = 0
        self.step_no = 0
        self.events: list[Event] = []
        self.plans: dict[tuple[Any, ...], Plan] = {}
        self.choice: dict[tuple[Any, ...], str] = {}
        self.evals: dict[tuple[Any, ...], dict[str, list[float]]] = {}
        self.suspicion: dict[str, list[float]] = {}  # pair -> ratios of its consecutive off-probes
        self.reference: dict[str, list[float]] = {}  # pair -> its first probes' one-way times
        # pair -> the fastest one-byte round trip seen: one probe's own one-byte time is far noisier than
        # the payload's (scheduling), and the fastest of a few one-way times would pick the probe whose
        # one-byte time happened to be slowest, a reference biased low
        self.rtt1_floor: dict[str, float] = {}
        self.baseline_probes = baseline_probes
        self.probe_repeats = probe_repeats
        if refit_repeats > 0 and len({max(int(f * probe_bytes), 1) for f in refit_sizes}) < 2:
            raise ValueError("refit_sizes must give at least two different payload sizes")
        self.refit_sizes = sorted({max(int(f * probe_bytes), 1) for f in refit_sizes})
        self.refit_repeats = refit_repeats
        if latency_drift_us is not None and not latency_drift_us >= 0:
            raise ValueError(
                f"latency_drift_us must be 0 or more (None: latency not tracked), not {latency_drift_us}"
            )
        self.latency_drift_us = latency_drift_us
        self.rtt1_reference: dict[str, list[float]] = {}  # pair -> its first probes' one-byte round trips
        self.latency_suspicion: dict[str, list[float]] = {}  # pair -> one-byte ratios of off-probes in a row
        self.last_probe: dict[str, dict[str, float]] = {}
        # Probed pairs: those the model joins (a link, or a path over switches and NICs). Two NPUs it does
        # not join (a torus's diagonal) have no link to blame for a drift; their probes would only cost time.
        joined = ([p for p in rnd if self._modelled(*p)] for rnd in round_robin(self.size))
        self._rounds = [r for r in joined if r]
        self._probed = {p for rnd in self._rounds for p in rnd}  # (lower rank, higher rank)
        self._probe_buf: torch.Tensor | None = None
        self.device = "cpu"

    def _modelled(self, a: int, b: int) -> bool:
        """Whether the topology joins ranks a and b both ways without another NPU between them."""
        try:
            route(self.doc, self.npus[a], self.npus[b])
            route(self.doc, self.npus[b], self.npus[a])
        except ValueError:
            return False
        return True

    # ---- plans ------------------------------------------------------------------------------------
    def plan(self, collective: str, nbytes: int, root: int = 0) -> Plan:
        """The current plan for (collective, size, root): synthesized on rank 0, shared through the store."""
        key = (self.version, collective, int(nbytes), root)
        p = self.plans.get(key)
        if p is not None:
            return p
        name = f"plan/v{self.version}/{collective}/{int(nbytes)}/{root}"
        if self.rank == 0:
            from autoccl import synth

            sched, _ = synth.synthesize(
                self.topo, collective, float(max(nbytes, 1)), chunks=self.chunks, seeds=self.seeds, root=root
            )
            p = Plan.from_schedule(sched, self.topo)
            self.store.set(name, json.dumps(p.to_dict()))
        else:
            p = Plan.from_dict(json.loads(self.store.get(name)), source=name)
        self.plans[key] = p
        return p

    # ---- collectives ------------------------------------------------------------------------------
    def _sync(self, t: torch.Tensor) -> None:
        if t.is_cuda:
            torch.cuda.synchronize(t.device)

    def _run(
        self,
        collective: str,
        tensor: torch.Tensor,
        nbytes: int,
        root: int,
        run_plan: Callable[[Plan], Any],
        run_native: Callable[[], Any],
        op: Any = None,
    ) -> str:
        # Plan against native is judged per dtype and reduction as well as per size: the two cost differently
        # (an average divides, a native one may not exist for the dtype: gloo's integer AVG), and a native
        # that failed for one must not leave another of the same size without its comparison.
        key = (collective, int(nbytes), root, _variant(tensor.dtype, op))
        plan = self.plan(collective, nbytes, root)
        choice = self.choice.get(key, "evaluating")
        if choice == "plan":
            run_plan(plan)
            return "plan"
        if choice == "native":
            run_native()
            return "native"
        ev = self.evals.setdefault(key, {"plan": [], "native": []})
        mode = "plan" if len(ev["plan"]) <= len(ev["native"]) else "native"
        if mode == "native" and ev.get("native_failed"):
            mode = "plan"
        # a native call may fail after changing the tensor (gloo's AVG on integers sums in place, then
        # fails to divide): the plan then starts from the caller's values
        before = tensor.clone() if mode == "native" else None
        self._sync(tensor)
        t0 = time.perf_counter()
        if mode == "plan":
            run_plan(plan)
        else:
            try:
                run_native()
            except (RuntimeError, ValueError, NotImplementedError):
                # the backend lacks this collective: the plan has no competitor
                assert before is not None
                tensor.copy_(before)
                ev["native_failed"] = [1.0]
                run_plan(plan)
                mode = "plan"
        self._sync(tensor)
        ev[mode].append((time.perf_counter() - t0) * 1e6)
        return mode

    def _native(self, name: str, default: NativeFn) -> NativeFn:
        return self.native.get(name, default)

    def all_reduce(self, tensor: torch.Tensor, op: Any = dist.ReduceOp.SUM) -> str:
        """In place, like torch.distributed.all_reduce. Returns "plan" or "native" (what ran)."""
        g = self.group
        return self._run(
            "allreduce",
            tensor,
            tensor.numel() * tensor.element_size(),
            0,
            lambda p: C.all_reduce(tensor, p, op, g, self.t),
            lambda: self._native("allreduce", lambda x, o: dist.all_reduce(x, o, group=g))(tensor, op),
            op,
        )

    def all_gather_into_tensor(self, output: torch.Tensor, input: torch.Tensor) -> str:
        g = self.group
        return self._run(
            "allgather",
            output,
            output.numel() * output.element_size(),
            0,
            lambda p: C.all_gather_into_tensor(output, input, p, g, self.t),
            lambda: self._native("allgather", lambda o, i: C.native_all_gather(o, i, group=g))(output, input),
        )

    def reduce_scatter_tensor(
        self, output: torch.Tensor, input: torch.Tensor, op: Any = dist.ReduceOp.SUM
    ) -> str:
        g = self.group
        return self._run(
            "reducescatter",
            input,
            input.numel() * input.element_size(),
            0,
            lambda p: C.reduce_scatter_tensor(output, input, p, op, g, self.t),
            lambda: self._native("reducescatter", lambda o, i, r: C.native_reduce_scatter(o, i, r, group=g))(
                output, input, op
            ),
            op,
        )

    def broadcast(self, tensor: torch.Tensor, src: int = 0) -> str:
        """From `src`, a rank of this Adaptive's group (torch.distributed's group_src)."""
        g = self.group
        gsrc = dist.get_global_rank(g, src) if g is not None else src
        return self._run(
            "broadcast",
            tensor,
            tensor.numel() * tensor.element_size(),
            src,
            lambda p: C.broadcast(tensor, p, group=g, transport=self.t, group_src=src),
            lambda: self._native("broadcast", lambda x, s: dist.broadcast(x, s, group=g))(tensor, gsrc),
        )

    def reduce(self, tensor: torch.Tensor, dst: int = 0, op: Any = dist.ReduceOp.SUM) -> str:
        """To `dst`, a rank of this Adaptive's group (torch.distributed's group_dst)."""
        g = self.group
        gdst = dist.get_global_rank(g, dst) if g is not None else dst
        return self._run(
            "reduce",
            tensor,
            tensor.numel() * tensor.element_size(),
            dst,
            lambda p: C.reduce(tensor, p, op=op, group=g, transport=self.t, group_dst=dst),
            lambda: self._native("reduce", lambda x, d, o: dist.reduce(x, d, o, group=g))(tensor, gdst, op),
            op,
        )

    # ---- iteration boundary ----------------------------------------------------------------------
    def _probe(self) -> dict[str, dict[str, float]]:
        """This step's probes, as initiator: {"a->b": {rtt1_us, rtt_us}}."""
        out: dict[str, dict[str, float]] = {}
        if self.size < 2:
            return out
        if self._probe_buf is None:
            dev = "cuda" if torch.cuda.is_available() and dist.get_backend(self.group) == "nccl" else "cpu"
            self.device = dev
            self._probe_buf = torch.zeros(self.probe_bytes, dtype=torch.uint8, device=dev)
        buf = self._probe_buf
        ack = torch.zeros(1, dtype=torch.uint8, device=buf.device)
        if not self._rounds:  # no pair the model joins directly
            return out
        rnd = self._rounds[(self.step_no - 1) % len(self._rounds)]
        for a, b in rnd:
            if self.rank not in (a, b):
                continue
            peer = b if self.rank == a else a
            for initiator in (a, b):
                me = self.rank == initiator
                r1 = min(
                    pingpong(self.t, peer, me, buf, ack, 1, _PROBE_TAG) for _ in range(self.probe_repeats)
                )
                rs = min(
                    pingpong(self.t, peer, me, buf, ack, self.probe_bytes, _PROBE_TAG)
                    for _ in range(self.probe_repeats)
                )
                if me:
                    out[f"{self.rank}->{peer}"] = {"rtt1_us": r1, "rtt_us": rs}
        return out

    def _exchange(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        prefix = f"step/{self.step_no}/"
        self.store.set(prefix + str(self.rank), json.dumps(payload))
        keys = [prefix + str(r) for r in range(self.size)]
        try:
            raw = self.store.multi_get(keys)
        except (AttributeError, RuntimeError):
            raw = [self.store.get(k) for k in keys]
        if self.rank == 0 and self.step_no > 1:  # every rank has read the previous step's keys by now
            for r in range(self.size):
                try:
                    self.store.delete_key(f"step/{self.step_no - 1}/{r}")
                except (AttributeError, RuntimeError):
                    break
        return [json.loads(x) for x in raw]

    def step(self) -> list[Event]:
        """The iteration boundary: probe, agree through the store, re-plan or choose. Collective: every
        rank must call it at the same point. Returns this step's events."""
        self.step_no += 1
        probes = self._probe() if self.probing else {}
        evals = {}
        for key, ev in self.evals.items():
            if self.choice.get(key, "evaluating") != "evaluating":
                continue
            if len(ev["plan"]) >= self.eval_calls and (
                len(ev["native"]) >= self.eval_calls or ev.get("native_failed")
            ):
                evals["|".join(map(str, key))] = {
                    "plan": sum(ev["plan"]) / len(ev["plan"]),
                    "native": sum(ev["native"]) / len(ev["native"]) if ev["native"] else None,
                }
        everyone = self._exchange({"probes": probes, "evals": evals})
        events: list[Event] = []
        events += self._decide_choices(everyone)
        events += self._decide_drift(everyone)
        self.events += events
        return events

    def _decide_choices(self, everyone: list[dict[str, Any]]) -> list[Event]:
        events = []
        common = set.intersection(*(set(e["evals"]) for e in everyone))
        for name in sorted(common):
            coll, nbytes, root, variant = name.split("|")
            key = (coll, int(nbytes), int(root), variant)
            plan_t = max(e["evals"][name]["plan"] for e in everyone)
            natives = [e["evals"][name]["native"] for e in everyone]
            native_t = None if any(x is None for x in natives) else max(natives)
            pick = "plan" if native_t is None or plan_t < native_t else "native"
            self.choice[key] = pick
            self.evals.pop(key, None)
            events.append(
                Event(
                    self.step_no,
                    "choice",
                    {
                        "collective": coll,
                        "bytes": int(nbytes),
                        "variant": variant,
                        "version": self.version,
                        "pick": pick,
                        "plan_us": plan_t,
                        "native_us": native_t,
                        "predicted_us": self.plan(coll, int(nbytes), int(root)).time_us,
                    },
                )
            )
        return events

    def _decide_drift(self, everyone: list[dict[str, Any]]) -> list[Event]:
        measured: dict[str, dict[str, float]] = {}
        for e in everyone:
            measured.update(e["probes"])
        flagged: dict[str, float] = {}
        flagged_latency: dict[str, float] = {}
        for pair in sorted(measured):
            a, b = sorted(int(x) for x in pair.split("->"))
            if (a, b) not in self._probed:
                continue  # a probe of a pair this model does not join (sent by hand): no link to blame
            m = measured[pair]
            if self.latency_drift_us is not None:
                self._watch_latency(pair, m["rtt1_us"], flagged_latency)
            floor = self.rtt1_floor[pair] = min(self.rtt1_floor.get(pair, m["rtt1_us"]), m["rtt1_us"])
            one_way = m["rtt_us"] - floor / 2
            ref = self.reference.setdefault(pair, [])
            if len(ref) < self.baseline_probes:  # the pair's normal time, under the current topology
                ref.append(one_way)
                continue
            ratio = one_way / min(ref)  # interference only adds time: the fastest is the pair's own
            self.last_probe[pair] = {"ratio": ratio, "measured_us": one_way}
            confirmed = self._confirm(self.suspicion, pair, ratio, self._off(ratio))
            if confirmed is not None:
                flagged[pair] = confirmed
        drifted = sorted(set(flagged) | set(flagged_latency))
        if not drifted:
            return []
        events: list[Event] = []
        for pair in drifted:
            a, b = (int(x) for x in pair.split("->"))
            lat, bw = route_model(self.doc, self.npus[a], self.npus[b])
            bw_ratio, latency_ratio = flagged.get(pair), flagged_latency.get(pair)
            estimate, intercept = self._refit(pair) if self.refit_repeats > 0 else (None, None)
            new_bw = bw
            if estimate is not None:
                new_bw = self._set_pair_bandwidth(a, b, estimate.bandwidth_gbps)
            elif bw_ratio is not None:
                new_bw = self._scale_pair(a, b, bw_ratio)
            detail: dict[str, Any] = {
                "pair": pair,
                "ratio": bw_ratio,
                "bandwidth_gbps_before": bw,
                "bandwidth_gbps_after": new_bw,
                "estimate": estimate.to_dict() if estimate is not None else None,
            }
            if self.latency_drift_us is not None:
                if intercept is not None:  # half the round trip's fixed part, as `autoccl profile` takes it
                    new_lat = self._set_pair_latency(a, b, intercept / 2)
                elif latency_ratio is not None:
                    new_lat = self._set_pair_latency(a, b, lat * latency_ratio)
                else:
                    new_lat = lat
                detail.update(latency_ratio=latency_ratio, latency_us_before=lat, latency_us_after=new_lat)
            events.append(Event(self.step_no, "drift", detail))
            for history in (
                self.suspicion,
                self.reference,
                self.rtt1_floor,
                self.latency_suspicion,
                self.rtt1_reference,
            ):
                history.pop(pair, None)
        from autoccl.synth import topology_from_dict

        self.topo = topology_from_dict(self.doc, source="adaptive topology")
        self.version += 1
        self.plans.clear()
        self.choice.clear()
        self.evals.clear()
        events.append(Event(self.step_no, "replan", {"version": self.version, "pairs": drifted}))
        return events

    def _watch_latency(self, pair: str, rtt1_us: float, flagged: dict[str, float]) -> None:
        """The latency rule (module doc): flag `pair` in `flagged` at the fastest confirming ratio."""
        ref = self.rtt1_reference.setdefault(pair, [])
        if len(ref) < self.baseline_probes:
            ref.append(rtt1_us)
            return
        base = min(ref)
        ratio = rtt1_us / max(base, 1e-3)
        off = self._off(ratio) and abs(rtt1_us - base) > float(self.latency_drift_us or 0.0)
        confirmed = self._confirm(self.latency_suspicion, pair, ratio, off)
        if confirmed is not None:
            flagged[pair] = confirmed

    def _off(self, ratio: float) -> bool:
        """Whether a probe's ratio to its pair's reference is off by more than `drift_ratio`, either way."""
        return ratio > self.drift_ratio or ratio < 1 / self.drift_ratio

    def _confirm(self, suspicion: dict[str, list[float]], pair: str, ratio: float, off: bool) -> float | None:
        """A probe off its reference adds its ratio to the pair's `suspicion`, one that is not clears it; with
        `confirm` in a row the pair is flagged at the fastest confirming ratio (as for the reference:
        interference only adds time), which is returned, else None."""
        if off:
            suspicion.setdefault(pair, []).append(ratio)
        else:
            suspicion.pop(pair, None)
        seen = suspicion.get(pair, [])
        return min(seen) if len(seen) >= self.confirm else None

    def _refit(self, pair: str) -> tuple[LinkEstimate, float | None]:
        """Measure the flagged direction a->b afresh before re-planning: ping-pongs of several payload
        sizes (`refit_sizes` x probe_bytes), `refit_repeats` of each; the bandwidth is the slope of the
        per-size medians (autoccl.adaptive.profile.estimate_link). The two probes that flagged the pair
        saw one size, and whatever lag they carried scaled the link; a slope over sizes leaves a lag that
        every ping-pong pays alike in the intercept. Collective: every rank calls it for every flagged
        pair in the same order; the initiator shares its round trips through the store so that every
        rank fits the same numbers. With latency tracked, one-byte ping-pongs are timed too, and the second
        value is the intercept (us) of the line over them and the payloads' medians; otherwise None."""
        a, b = (int(x) for x in pair.split("->"))
        tracked = self.latency_drift_us is not None
        sizes = sorted({1, *self.refit_sizes}) if tracked else self.refit_sizes
        if self.rank in (a, b):
            rtts = measure_direction(
                self.t,
                b if self.rank == a else a,
                self.rank == a,
                sizes,
                self.refit_repeats,
                self.device,
                _REFIT_TAG,
            )
            if self.rank == a:
                self.store.set(f"refit/{self.step_no}/{pair}", json.dumps(rtts))
        raw = {int(s): v for s, v in json.loads(self.store.get(f"refit/{self.step_no}/{pair}")).items()}
        estimate = estimate_link({s: raw[s] for s in self.refit_sizes})
        if not tracked:
            return estimate, None
        med = [float(statistics.median(raw[s])) for s in sizes]
        intercept, _, _, _ = fit_alpha_beta(sizes, med)
        return estimate, intercept

    def _set_pair_bandwidth(self, a: int, b: int, gbps: float) -> float:
        """Give the direct link a->b (or, on a switch path, the sender's first hop) the bandwidth `gbps`.
        Returns the link's new bandwidth."""
        links = {(x["src"], x["dst"]): x for x in self.doc["links"]}
        hop = route(self.doc, self.npus[a], self.npus[b])[0]
        links[hop]["bandwidth_gbps"] = round(gbps, 6)
        return float(links[hop]["bandwidth_gbps"])

    def _set_pair_latency(self, a: int, b: int, us: float) -> float:
        """Make the modelled latency of the path a->b `us` (at least 0) through its first hop: the direct
        link, or on a switch path the sender's port, the other hops keeping theirs. Returns the path's new
        latency."""
        links = {(x["src"], x["dst"]): x for x in self.doc["links"]}
        hops = route(self.doc, self.npus[a], self.npus[b])
        rest = sum(float(links[h]["latency_us"]) for h in hops[1:])
        links[hops[0]]["latency_us"] = round(max(us - rest, 0.0), 4)
        return float(links[hops[0]]["latency_us"]) + rest

    def _scale_pair(self, a: int, b: int, ratio: float) -> float:
        """Make the modelled time of a probe from a to b `ratio` times what it was, by changing the
        bandwidth of the direct link a->b (or, on a switch path, of the sender's first hop). Returns the
        link's new bandwidth."""
        lat, bw = route_model(self.doc, self.npus[a], self.npus[b])
        target_us = (lat + self.probe_bytes / (bw * 1e3)) * ratio
        new_bw = self.probe_bytes / max(target_us - lat, 1e-3) / 1e3
        self._set_pair_bandwidth(a, b, new_bw)
        return new_bw

    def topology_document(self) -> dict[str, Any]:
        return json.loads(json.dumps(self.doc))


def ddp_comm_hook(state: Adaptive, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: average the gradient bucket with the adaptive All-Reduce.

    model.register_comm_hook(Adaptive("measured.yaml"), ddp_comm_hook)
    """
    tensor = bucket.buffer()
    state.all_reduce(tensor)
    tensor.div_(state.size)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(tensor)
    return fut


# DDP checks the hook's annotations as objects; this module's are strings (postponed annotations)
ddp_comm_hook.__annotations__ = {
    "state": Adaptive,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}
