"""Rank functions for the multi-process tests (module level, so the fork server can import them)."""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from autoccl import synth as S
from autoccl.adaptive import collectives as C
from autoccl.adaptive.plan import Plan
from autoccl.adaptive.runtime import Adaptive, ddp_comm_hook
from autoccl.adaptive.transport import EmulatedTransport, Handle, LinkModel, Message, TorchTransport
from autoccl.adaptive.verify import run_matrix


class _All:
    def __init__(self, handles: list[Handle]) -> None:
        self.handles: list[Handle] | None = handles

    def wait(self) -> bool:
        if self.handles is not None:  # once: every op of the batch shares this handle
            for h in self.handles:
                h.wait()
            self.handles = None
        return True


class CoalescedTransport:
    """NCCL's semantics on gloo: one handle completes the whole batch."""

    def __init__(self) -> None:
        self.base = TorchTransport()
        self.rank, self.size = self.base.rank, self.base.size

    def issue(self, messages: Sequence[Message]) -> list[Handle]:
        if not messages:
            return []
        h = _All(self.base.issue(messages))
        return [h] * len(messages)


def coalesced_job(rank: int, world: int, spec: str) -> list[str]:
    t = S.parse_gen_spec(spec)
    plans = {c: Plan.from_schedule(S.synthesize(t, c, "1M", chunks=2)[0], t) for c in S.COLLECTIVES}
    rep = run_matrix(plans, rank, world, dtypes=[torch.float32, torch.int32], transport=CoalescedTransport())
    assert rep.cases > 0
    return rep.failures


def baselines_job(rank: int, world: int, spec: str, folder: str) -> list[str]:
    """Every baseline the synthesizer offers, through a schedule file, executed."""
    from pathlib import Path

    t = S.parse_gen_spec(spec)
    fails: list[str] = []
    for algo in S.BASELINES:
        plans = {}
        for coll in S.COLLECTIVES:
            try:
                sched = S.baseline(t, algo, coll, "1M", chunks=2)
            except ValueError:
                continue  # e.g. no rhd for this rank count
            path = Path(folder) / f"{algo}-{coll}.json"
            if rank == 0:
                S.save_schedule(S.simulate(t, sched)["timed"], path, t)
            dist.barrier()
            plans[coll] = Plan.load(path)
        fails += [
            f"{algo}: {f}"
            for f in run_matrix(plans, rank, world, dtypes=[torch.float64, torch.uint8]).failures
        ]
    return fails


def _fc_emulated(world: int, latency_us: float, gbps: float) -> tuple[EmulatedTransport, dict[str, Any]]:
    links = {(a, b): LinkModel(latency_us, gbps) for a in range(world) for b in range(world) if a != b}
    emu = EmulatedTransport(TorchTransport(), links)
    doc = {
        "name": "emulated",
        "npus": [f"e/r{r}" for r in range(world)],
        "links": [
            {"src": f"e/r{a}", "dst": f"e/r{b}", "latency_us": latency_us, "bandwidth_gbps": gbps}
            for a in range(world)
            for b in range(world)
            if a != b
        ],
    }
    return emu, doc


def drift_job(
    rank: int,
    world: int,
    slow_at: int,
    iters: int,
    latency_after_us: float = 20.0,
    slowdown: float = 4.0,
    latency_drift_us: float | None = None,
) -> dict[str, Any]:
    """A fully connected emulated network (a probe takes ~10 ms, well above scheduling noise); link 0->1
    becomes `slowdown` x slower, with a latency of `latency_after_us` (20 us before), at `slow_at`."""
    emu, doc = _fc_emulated(world, 20.0, 0.025)
    t = S.topology_from_dict(doc)
    ring = Plan.from_schedule(S.baseline(t, "ring", "allreduce", float(1 << 18)), t)
    ad = Adaptive(
        doc,
        transport=emu,
        chunks=2,
        seeds=2,
        probe_bytes=256 << 10,
        eval_calls=1,
        latency_drift_us=latency_drift_us,
        native={"allreduce": lambda x, op: C.all_reduce(x, ring, op, transport=emu)},
    )
    x = torch.empty(1 << 16)
    events, correct, versions = [], True, []
    for it in range(iters):
        if it == slow_at and rank == 0:
            emu.set_link(0, 1, LinkModel(latency_after_us, 0.025 / slowdown))
        x.fill_(rank + 1.0)
        mode = ad.all_reduce(x)
        if mode == "plan":
            correct &= bool(torch.all(x == world * (world + 1) / 2))
        versions.append(ad.version)
        events += [dict(e.to_dict(), iter=it) for e in ad.step()]
        if any(e["kind"] == "drift" and e["pair"] == "0->1" and e["iter"] >= slow_at for e in events):
            if it > slow_at + 25 or ad.choice:  # the new plan has been evaluated
                break
    return {
        "events": events,
        "correct": correct,
        "versions": versions,
        "plan": ad.plan("allreduce", 1 << 18).to_dict(),
    }


def fallback_job(rank: int, world: int) -> dict[str, Any]:
    """Plans over slow emulated links against gloo's own (unemulated, far faster) All-Reduce. The links are
    slow enough (~180 ms a plan call) that load cannot make gloo's call slower: at 0.01 Gbps (a plan call
    11-13 ms) gloo's averaged 13.2 ms once in CI; on 2 cores it takes 3-19 ms, 12-13 ms beside two busy
    loops."""
    emu, doc = _fc_emulated(world, 50.0, 0.0002)
    ad = Adaptive(doc, transport=emu, probe=False, eval_calls=2)
    x = torch.empty(1 << 14)
    modes = []
    for _ in range(7):
        x.fill_(1.0)
        modes.append(ad.all_reduce(x))
        assert torch.all(x == world)
        ad.step()
    return {"modes": modes, "choices": [e.to_dict() for e in ad.events if e.kind == "choice"]}


def ddp_job(rank: int, world: int) -> dict[str, Any]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(37, 19), torch.nn.ReLU(), torch.nn.Linear(19, 3))
    ref = torch.nn.Sequential(torch.nn.Linear(37, 19), torch.nn.ReLU(), torch.nn.Linear(19, 3))
    ref.load_state_dict(model.state_dict())
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)
    ddp_ref = torch.nn.parallel.DistributedDataParallel(ref, bucket_cap_mb=0.001)
    doc = {
        "npus": [f"r{r}" for r in range(world)],
        "switches": ["sw"],
        "links": [
            {"src": f"r{r}", "dst": "sw", "latency_us": 10, "bandwidth_gbps": 2, "bidirectional": True}
            for r in range(world)
        ],
    }
    ad = Adaptive(doc, probe=False, eval_calls=1)
    ddp.register_comm_hook(ad, ddp_comm_hook)
    g = torch.Generator().manual_seed(rank)
    for _ in range(3):
        x = torch.randn(8, 37, generator=g)
        for m in (ddp, ddp_ref):
            m.zero_grad()
            m(x).square().sum().backward()
        ad.step()
    same = all(
        torch.allclose(a.grad, b.grad, atol=1e-6)
        for a, b in zip(model.parameters(), ref.parameters(), strict=True)
    )
    return {
        "same": same,
        "buckets": len(list(model.parameters())),
        "events": [e.to_dict() for e in ad.events],
    }


def env_job(rank: int, world: int, names: list[str]) -> dict[str, str | None]:
    """The rank's values of the environment variables `names` (None: unset)."""
    return {n: os.environ.get(n) for n in names}


def _switch_doc(world: int, gbps: float = 2.0) -> dict[str, Any]:
    return {
        "npus": [f"r{r}" for r in range(world)],
        "switches": ["sw"],
        "links": [
            {"src": f"r{r}", "dst": "sw", "latency_us": 10, "bandwidth_gbps": gbps, "bidirectional": True}
            for r in range(world)
        ],
    }


def remade_job(rank: int, world: int) -> dict[str, Any]:
    """A second Adaptive on the same group, with another planner setting, after the first has run."""
    first = Adaptive(_switch_doc(world), probe=False, eval_calls=1, chunks=1)
    x = torch.ones(1 << 10)
    first.all_reduce(x)
    first.step()
    first.step()
    second = Adaptive(_switch_doc(world), probe=False, eval_calls=1, chunks=4)
    x = torch.ones(1 << 10)
    second.all_reduce(x)
    return {
        "nchunks": [
            first.plan("allreduce", x.numel() * 4).nchunks,
            second.plan("allreduce", x.numel() * 4).nchunks,
        ],
        "correct": bool(torch.all(x == world)),
        "steps": [[e.kind for e in second.step()] for _ in range(2)],
    }


def subgroups_job(rank: int, world: int) -> dict[str, Any]:
    """One Adaptive on each of two disjoint subgroups of different bandwidths. The second group's rank 1
    asks for its plan after the first group has made its own and before its rank 0 has made one (it must
    wait for it); then both run and step at the same time."""
    groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    mine = groups[rank // 2]
    ad = Adaptive(_switch_doc(2, 2.0 if rank < 2 else 0.5), group=mine, probe_bytes=4096, eval_calls=1)
    plan = ad.plan("allreduce", 4096) if rank < 2 else None
    dist.barrier()
    if rank == 2:
        time.sleep(0.5)  # its rank 1 asks first
    if rank >= 2:
        plan = ad.plan("allreduce", 4096)
    assert plan is not None
    correct = True
    for _ in range(4):
        x = torch.full((1024,), float(rank))
        want = x.clone()
        dist.all_reduce(want, group=mine)
        ad.all_reduce(x)
        correct &= torch.equal(x, want)
        ad.step()
    dist.barrier()  # rank 0 serves the store until every rank is done with it
    return {"plan": plan.to_dict(), "correct": correct}


def failing_native_job(rank: int, world: int) -> list[list[int]]:
    """Integer AVG, whose native All-Reduce on gloo sums in place and then fails to divide."""
    ad = Adaptive(_switch_doc(world), probe=False, eval_calls=2)
    out = []
    for _ in range(4):
        x = torch.full((8,), 2 * (rank + 1), dtype=torch.int32)
        ad.all_reduce(x, dist.ReduceOp.AVG)
        out.append(x.tolist())
    return out


def _ring_plans(world: int, root: int = 0) -> dict[str, Plan]:
    t = S.parse_gen_spec(f"ring:{world}")
    return {c: Plan.from_schedule(S.synthesize(t, c, "1M", chunks=3, root=root)[0], t) for c in S.COLLECTIVES}


def rooted_subgroup_job(rank: int, world: int) -> dict[str, Any]:
    """Broadcast and reduce on the subgroup of global ranks 1 and 2, rooted at global rank 2 (group rank 1),
    beside torch.distributed's: src/dst are global ranks, group_src/group_dst ranks of the group."""
    sub = dist.new_group([1, 2])
    out: dict[str, Any] = {}
    if rank in (1, 2):
        plans = _ring_plans(2, root=1)
        for name, kw in (("src", {"src": 2}), ("group_src", {"group_src": 1})):
            x = torch.arange(6.0) + 10 * rank
            want = x.clone()
            dist.broadcast(want, src=2, group=sub)
            C.broadcast(x, plans["broadcast"], group=sub, **kw)
            out[f"broadcast {name}"] = torch.equal(x, want)
        for name, kw in (("dst", {"dst": 2}), ("group_dst", {"group_dst": 1})):
            x = torch.arange(6.0) + 10 * rank
            want = x.clone()
            dist.reduce(want, dst=2, group=sub)
            C.reduce(x, plans["reduce"], group=sub, **kw)
            out[f"reduce {name}"] = (
                torch.equal(x, want) if rank == 2 else torch.equal(x, torch.arange(6.0) + 10)
            )
        try:
            C.broadcast(torch.ones(3), plans["broadcast"], src=1, group=sub)
        except ValueError as e:
            out["wrong src"] = str(e)
    dist.barrier()
    return out


def non_member_job(rank: int, world: int) -> str:
    sub = dist.new_group([0, 1])
    if rank != 2:
        x = torch.ones(4)
        C.all_reduce(x, _ring_plans(2)["allreduce"], group=sub)
        return str(x.tolist())
    try:
        C.all_reduce(torch.ones(4), _ring_plans(2)["allreduce"], group=sub)
    except ValueError as e:
        return str(e)
    return "no error"


def non_contiguous_job(rank: int, world: int) -> dict[str, bool]:
    """Every collective on transposed (non-contiguous) tensors beside torch.distributed's."""
    plans = _ring_plans(world)
    out = {}

    def tr(n: int, offset: float) -> torch.Tensor:
        return (torch.arange(float(n * 3)).reshape(3, n) + offset).t()  # n x 3, not contiguous

    x, want = tr(4, rank), tr(4, rank).contiguous()
    C.all_reduce(x, plans["allreduce"])
    dist.all_reduce(want)
    out["all_reduce"] = not x.is_contiguous() and torch.equal(x, want)
    x, want = tr(4, rank), tr(4, rank).contiguous()
    C.broadcast(x, plans["broadcast"], src=0)
    dist.broadcast(want, 0)
    out["broadcast"] = torch.equal(x, want)
    x, want = tr(4, rank), tr(4, rank).contiguous()
    C.reduce(x, plans["reduce"], dst=0)
    dist.reduce(want, 0)
    out["reduce"] = torch.equal(x, want) if rank == 0 else torch.equal(x, tr(4, rank))
    got = torch.zeros(3, world * 2).t()  # (2 * world) x 3, not contiguous
    inp = tr(2, rank)
    want = torch.zeros(world * 2, 3)
    C.all_gather_into_tensor(got, inp, plans["allgather"])
    dist.all_gather_into_tensor(want, inp.contiguous())
    out["all_gather_into_tensor"] = torch.equal(got, want)
    outs = [torch.zeros(3, 2).t() for _ in range(world)]
    wants = [torch.zeros(2, 3) for _ in range(world)]
    C.all_gather(outs, inp, plans["allgather"])
    dist.all_gather(wants, inp.contiguous())
    out["all_gather"] = all(torch.equal(a, b) for a, b in zip(outs, wants, strict=True))
    got = torch.zeros(3, 2).t()
    want = torch.zeros(2, 3)
    inp = tr(2 * world, rank)
    C.reduce_scatter_tensor(got, inp, plans["reducescatter"])
    dist.reduce_scatter_tensor(want, inp.contiguous())
    out["reduce_scatter_tensor"] = torch.equal(got, want)
    got = torch.zeros(3, 2).t()
    C.reduce_scatter(got, [tr(2, rank + k) for k in range(world)], plans["reducescatter"])
    out["reduce_scatter"] = torch.equal(got, tr(2, rank) * world + sum(range(world)))
    return out
