"""Straggler-tolerant, failure-surviving gradient all-reduce for DDP (a communication hook).

Each rank runs a communication agent (a thread) beside training. Every step is one *round*: the ranks
agree through the store which of them take part (control.py), then the agents all-reduce the gradient
buckets over the reducer's own process group. A rank left out of a round still takes part in the
collectives through its agent, with zeros, so the collective never waits for its computation; the
gradient it finishes late is kept and added to the first round it rejoins (stale by at most max_lag
steps), and it applies the updates it missed, in order, so every rank holds the same weights. Each round
applies the mean of the gradients it carries (fresh and late), so a partial step is as large as a
full one and every gradient computed is used once (unless the run ends before its rank rejoins).

When a rank is lost (its heartbeat stops, a collective fails, or the coordinator disappears) the
survivors meet in the store, seal the new membership with one compare-and-set, shrink or re-create the
group, settle the round in flight (a round some survivors finished is sent to the others) and go on.

A replacement worker (a new process the launcher starts, `Newcomer`) asks to join through the store;
the group admits it after a round every member took part in, grows the group with it, and the lowest
former member sends it the weights and the optimizer's state, so that it applies the next round with
the same weights as everyone else.

Usage (every rank):
    ddp = DistributedDataParallel(model, broadcast_buffers=False)
    reducer = Reducer(ddp, steps=N, config=ResilienceConfig())
    while reducer.next_step < N:
        loss = loss_fn(ddp(batch(reducer.next_step)))
        loss.backward()
        reducer.step(optimizer)  # instead of optimizer.step(); may apply several updates
        optimizer.zero_grad(set_to_none=True)
    reducer.close()

A replacement worker (its own default group, e.g. init_process_group with world_size=1):
    reducer = Reducer(ddp, steps=N, config=..., store=job_store, newcomer=Newcomer(rank, optimizer))
    # blocks until admitted; reducer.next_step is the first step it computes
"""

from __future__ import annotations

import datetime
import json
import logging
import math
import os
import sys
import threading
import time
import traceback
import uuid
import zlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import torch
import torch.distributed as dist

from autoccl.resilience import group as G
from autoccl.resilience.config import (
    MembershipDisagreement,
    RankExcluded,
    ResilienceConfig,
    ResilienceError,
    RunEnded,
    first_line,
)
from autoccl.resilience.control import (
    Decision,
    JoinRequests,
    Keys,
    Plane,
    RoundView,
    Rules,
    Store,
    recover_decision,
)
from autoccl.resilience.layout import BucketLayout, Remap, placed
from autoccl.resilience.layout import decode as decode_layout
from autoccl.resilience.layout import encode as encode_layout
from autoccl.resilience.liveness import Liveness
from autoccl.resilience.skirental import BuyCost, WaitRule
from autoccl.resilience.transfer import receive_state, send_state

log = logging.getLogger("autoccl.resilience")
RECOVERY_HUNG_EXIT = 75  # the exit status of a rank whose recovery hung (EX_TEMPFAIL: the job may be retried)

_instances = 0  # store namespace per reducer (every rank creates its reducers in the same order)
_KEEP_ROUNDS = 8  # store keys of older rounds are deleted


@dataclass
class RoundRecord:
    """What this rank applied in one round (identical on every rank; the tests compare them)."""

    epoch: int
    round: int
    kind: str
    group: tuple[int, ...]
    members: tuple[int, ...]
    fresh: tuple[int, ...]  # ranks whose gradient of this step is in the round
    stale: dict[int, int]  # rank -> staleness (steps) of the late gradient it folded in
    waited_ms: float
    budget_ms: float
    done_s: float  # time.monotonic() when the round completed on this rank
    shared: bool = False  # the round's result came from a survivor after a failure
    admitted: tuple[int, ...] = ()  # newcomers the group grows by after this round

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["stale"] = {str(k): v for k, v in self.stale.items()}
        return d


@dataclass
class Recovery:
    epoch: int  # the new epoch
    round: int  # the first round of the new group
    lost: tuple[int, ...]
    survivors: tuple[int, ...]
    how: str  # shrink_group or re-created
    reason: str
    seconds: float  # from detection to the new group


@dataclass
class Join:
    epoch: int  # the epoch the group grew in (an admission keeps the epoch)
    round: int  # the first round of the grown group
    joined: tuple[int, ...]
    group: tuple[int, ...]
    seconds: float  # from the admitting round's end to the new group (and, on the source, the state sent)


@dataclass
class Newcomer:
    """A replacement worker joining a running job as global rank `rank`. Its default process group is
    its own (the job's is not open to it); the job's key-value store is passed to the Reducer. The
    optimizer receives the group's state; build it as the other ranks do."""

    rank: int
    optimizer: torch.optim.Optimizer


@dataclass(frozen=True)
class _Admission:
    """The group grows after round `round` (every member applies it first)."""

    epoch: int  # the epoch of the admitting round (the grown group keeps it)
    round: int
    joiners: dict[int, str]  # rank -> its request's token
    previous: G.Group
    ranks: tuple[int, ...]  # the grown group

    @property
    def source(self) -> int:
        """The member that writes the admissions and sends the newcomers the state."""
        return self.previous.ranks[0]


@dataclass
class _Translated:
    """A step of a newcomer whose DDP lays its buckets out unlike the group (its first step comes before
    DDP rebuilds its buckets): bucket index -> (DDP's buffer, its parameters (index, offset, numel),
    the future DDP waits on)."""

    buckets: dict[
        int, tuple[torch.Tensor, list[tuple[int, int, int]], torch.futures.Future[torch.Tensor]]
    ] = field(default_factory=dict)


@dataclass
class StepReport:
    step: int  # the step this rank computed
    applied: list[int] = field(default_factory=list)  # rounds whose updates step() applied
    lagged: bool = False  # this rank's gradient missed its round (it rejoins with it later)


class _Recover(Exception):
    def __init__(self, reason: str, suspects: tuple[int, ...] = ()) -> None:
        super().__init__(reason)
        self.reason = reason
        self.suspects = suspects


class _Closed(Exception):
    pass


def _hook(state: Reducer, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    return state._on_bucket(bucket)


def _future(like: torch.Tensor) -> torch.futures.Future[torch.Tensor]:
    return torch.futures.Future(devices=[like.device]) if like.is_cuda else torch.futures.Future()


# DDP compares the annotations with the classes themselves (this module's are strings).
_hook.__annotations__ = {
    "state": object,
    "bucket": dist.GradBucket,
    "return": torch.futures.Future[torch.Tensor],
}


class Reducer:
    """Attach to a DistributedDataParallel module (collective: every rank of its group calls it, except
    a newcomer, which joins the running group)."""

    def __init__(
        self,
        ddp: torch.nn.parallel.DistributedDataParallel,
        steps: int,
        config: ResilienceConfig | None = None,
        *,
        store: Any = None,
        newcomer: Newcomer | None = None,
    ) -> None:
        global _instances
        self.config = (config or ResilienceConfig()).validate()
        if steps < 1:
            raise ResilienceError("the reducer needs the number of steps of the run (steps >= 1)")
        syncs = getattr(ddp, "forward_sync_buffers", getattr(ddp, "broadcast_buffers", False))
        if syncs and any(True for _ in ddp.module.buffers()):
            raise ResilienceError(
                "construct DistributedDataParallel without buffer synchronisation in forward "
                "(broadcast_buffers=False): it waits for every rank and cannot survive a lost rank"
            )
        if newcomer is not None and store is None:
            raise ResilienceError("a newcomer needs the job's key-value store (store=...)")
        self.steps = steps
        self.rank = newcomer.rank if newcomer is not None else dist.get_rank()
        self._module = ddp.module
        params = list(ddp.module.parameters())
        self._param_index = {id(p): i for i, p in enumerate(params)}
        self.device = params[0].device if params else torch.device("cpu")
        cfg = self.config
        base = store if store is not None else dist.distributed_c10d._get_default_store()
        self._base: Any = base
        self._prefix = f"autoccl-resilience/{_instances}/"
        _instances += 1
        self._tls = threading.local()
        self._cv = threading.Condition()
        self._epoch = 0
        self._generation = 0  # bumped whenever the group changes (a recovery, an admission): ends timers
        self._round = 0  # next round the agent works on
        self._decided = -1  # last round whose decision this rank has read
        self._decision: Decision | None = None  # decision of the round in flight
        self._next_step = 0
        self._applied = -1  # the last round whose update step() applied
        self._inbox: dict[tuple[int, int], tuple[torch.Tensor, Any, bool]] = {}
        self._futures: dict[tuple[int, int], torch.futures.Future[torch.Tensor]] = {}
        self._fresh_steps: set[int] = set()
        self._registered: set[tuple[int, int]] = set()  # (epoch, round)
        self._pending: dict[int, torch.Tensor] = {}  # bucket -> late gradient
        self._pending_from = -1
        # config.agent_stream: the agent's own CUDA stream (high priority: the low-priority pool is where
        # ProcessGroupNCCL takes its streams, and sharing one would queue the copies behind all-reduces);
        # per round, when its results are complete on the agent's stream.
        self._agent_stream: torch.cuda.Stream | None = (
            torch.cuda.Stream(self.device, priority=-1)
            if cfg.agent_stream and self.device.type == "cuda"
            else None
        )
        self._done_events: dict[int, torch.cuda.Event] = {}
        self._pending_ev: torch.cuda.Event | None = None  # the late gradient's copy is complete
        self._join = False
        self._results: dict[int, list[torch.Tensor]] = {}
        self._last_done: tuple[int, list[torch.Tensor]] | None = None
        self._records: dict[int, RoundRecord] = {}
        self.records: list[RoundRecord] = []
        self.recoveries: list[Recovery] = []
        self.joins: list[Join] = []
        self._warm_layout: dict[int, dict[int, BucketLayout]] = {}
        self._layout: list[BucketLayout] | None = None
        self._admission: _Admission | None = None
        self._pending_join: tuple[Join, str] | None = None  # recorded once the grown group's first round ends
        self._translate = False  # a newcomer maps DDP's buckets onto the group's (_Translated)
        self._translated: dict[int, _Translated] = {}
        self._remap: Remap | None = None  # a newcomer's copies between DDP's buckets and the group's
        self._first_step = 0
        self.copied_steps = 0  # a newcomer's steps whose buckets were mapped onto the group's layout
        self.reordered_steps = 0  # ... of which DDP's layout differed from the group's
        self._optimizer: torch.optim.Optimizer | None = None  # the one step() was last given
        self._error: BaseException | None = None
        self._closed = False
        self._recovering = False
        self._inflight: list[Any] = []  # collectives of the round in flight (a failure may strand them)
        self._cost = BuyCost(cfg.accuracy_weight)
        self._rule = WaitRule(cfg.rule, cfg.seed)
        self._timer: _Timer | None = None
        self._timers: list[_Timer] = []  # every epoch's, joined by close()
        self._test_corrupt_view: Callable[[Decision], Decision] | None = None  # tests only
        self._followable: set[str] = set()  # request heartbeat keys seen written (heartbeat thread only)
        self._refused: set[str] = set()  # tokens of requests taken as dead (logged once)
        s = self._store()
        self._token = uuid.uuid4().hex if newcomer is not None else ""  # a newcomer's own keys
        beat = Keys.heartbeat(self.rank, f"{self._token}-0" if newcomer is not None else "")
        s.add(beat, 1)  # before anyone watches (Liveness reads with multi_get)
        if newcomer is None:
            world = dist.get_world_size()
            self.rules = Rules(cfg.warmup_steps, cfg.max_absent, cfg.max_lag, cfg.members_floor(world))
            self._group = G.create(
                str(dist.get_backend(ddp.process_group)), self.device, cfg.collective_timeout_s
            )
            s.add("started", 1)
            deadline = time.monotonic() + cfg.census_s
            while int(s.add("started", 0)) < world:
                if time.monotonic() > deadline:
                    raise ResilienceError(
                        f"not every rank started the resilient reducer within {cfg.census_s} s"
                    )
                time.sleep(0.005)
            self._liveness = Liveness(
                self._store,
                self.rank,
                beat,
                {r: Keys.heartbeat(r) for r in self._group.ranks},
                cfg.heartbeat_s,
                cfg.dead_after_s,
                self._requests_to_follow,
            )
            self._view = RoundView(0, self._group.ranks, {})
            self._liveness.start()
        else:
            # Heartbeats first: the group watches a newcomer from the moment it admits it.
            self._liveness = Liveness(
                self._store,
                self.rank,
                beat,
                {self.rank: beat},
                cfg.heartbeat_s,
                cfg.dead_after_s,
                self._requests_to_follow,
            )
            self._liveness.start()
            try:
                self._enter(newcomer.optimizer)
            except BaseException:
                self._liveness.stop()
                raise
        ddp.register_comm_hook(self, _hook)
        self._agent = threading.Thread(
            target=self._agent_main, name=f"autoccl-reducer-{self.rank}", daemon=True
        )
        self._agent.start()

    # ------------------------------------------------------------------------------------- public

    @property
    def next_step(self) -> int:
        return self._next_step

    @property
    def ranks(self) -> tuple[int, ...]:
        """Global ranks of the live group."""
        with self._cv:
            return self._group.ranks

    @property
    def process_group(self) -> Any:
        """The live process group (for the job's own collectives after a failure)."""
        with self._cv:
            return self._group.pg

    def step(
        self, optimizer: torch.optim.Optimizer, before_step: Callable[[], None] | None = None
    ) -> StepReport:
        """Apply this step's update (instead of optimizer.step()). A rank whose gradient missed its round
        also applies the updates it missed, rejoins with its late gradient and skips the steps the group
        computed meanwhile; `before_step` (e.g. gradient clipping) runs before every update."""
        s = self._next_step
        rec = self._wait_round(s)
        report = StepReport(step=s)
        self._update(optimizer, before_step, s, from_grads=True)
        self._applied_round(s, optimizer)
        report.applied.append(s)
        if self.rank in rec.fresh:
            self._next_step = s + 1
            return report
        report.lagged = True
        r = s + 1
        with self._cv:
            self._join = r < self.steps
            # Offer the late gradient to the round being decided now (the agent may already be waiting
            # for its decision; it registers again for later rounds if this one goes on without it).
            if self._join and self._decided < self._round and not self._recovering:
                self._register(self._round)
            self._cv.notify_all()
        while r < self.steps:
            rec_r = self._wait_round(r)
            self._update(optimizer, before_step, r, from_grads=False)
            self._applied_round(r, optimizer)
            report.applied.append(r)
            if self.rank in rec_r.members:
                break
            r += 1
        self._next_step = min(r + 1, self.steps)
        return report

    def _applied_round(self, r: int, optimizer: torch.optim.Optimizer) -> None:
        """Round r's update is in the weights: the member that sends newcomers the state after r may
        read them (and the optimizer) now."""
        with self._cv:
            adm = self._admission
            sending = adm is not None and adm.round == r and adm.source == self.rank
        if sending and self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        with self._cv:
            self._applied = r
            self._optimizer = optimizer
            self._cv.notify_all()
            # The newcomer gets the state as of this round: training waits here while the agent sends
            # it (the forward pass of the next step would change buffers, a scheduler the learning rate).
            while sending and self._admission is adm and not self._closed and self._error is None:
                self._cv.wait(timeout=0.5)

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop the agent and heartbeat threads (also after an error: a thread left inside a store
        call when the interpreter exits aborts the process)."""
        with self._cv:
            self._closed = True
            finished = self._next_step >= self.steps and self._error is None
            self._cv.notify_all()
        if finished:  # a newcomer still waiting for its admission learns there is nothing left to join
            try:
                self._store().set(Keys.run_ended(), "1")
            except (RuntimeError, dist.DistStoreError) as e:
                log.warning("autoccl.resilience: could not mark the run as ended: %s", first_line(e))
        self._agent.join(timeout=timeout_s)
        for timer in self._timers:  # an earlier epoch's clock may still be inside a store wait
            timer.join(timeout=timeout_s)
        self._liveness.stop()
        self._liveness.join(timeout=timeout_s)

    def stats(self) -> dict[str, Any]:
        recs = self.records
        partial = [r for r in recs if r.kind == "partial"]
        return {
            "rounds": len(recs),
            "partial_rounds": len(partial),
            "stale_folds": sum(len(r.stale) for r in recs),
            "max_staleness": max((v for r in recs for v in r.stale.values()), default=0),
            "waited_ms": sum(r.waited_ms for r in recs),
            "recoveries": [asdict(x) for x in self.recoveries],
            "joins": [asdict(x) for x in self.joins],
            "copied_steps": self.copied_steps,
            "reordered_steps": self.reordered_steps,
            "group": list(self.ranks),
        }

    # ------------------------------------------------------------------------------- main thread

    def _store(self) -> Any:
        s = getattr(self._tls, "store", None)
        if s is None:
            s = dist.PrefixStore(self._prefix, self._base.clone())
            self._tls.store = s
        return s

    def _requests(self) -> JoinRequests:
        """This thread's reader of join requests (as its store: one per thread)."""
        r = getattr(self._tls, "requests", None)
        if r is None:
            r = JoinRequests()
            self._tls.requests = r
        return r

    def _check_error(self) -> None:
        if self._error is not None:
            if isinstance(self._error, ResilienceError):
                raise type(self._error)(str(self._error))
            raise ResilienceError(f"the reducer's agent stopped: {self._error}") from self._error

    def _on_bucket(self, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        data = bucket.buffer()
        fut = _future(data)
        with self._cv:
            if self._error is not None:  # step() raises the error; backward just completes
                fut.set_result(torch.zeros_like(data))
                return fut
            s = self._next_step
            if s >= self.steps:
                self._error = ResilienceError(
                    f"step {s} is past the {self.steps} steps the reducer was given"
                )
                fut.set_result(torch.zeros_like(data))
                return fut
            if self._translate:
                self._on_bucket_translated(s, bucket, fut)
                return fut
            self._accept(s, bucket.index(), data, bucket.is_last(), fut, bucket)
        return fut

    def _accept(
        self,
        s: int,
        b: int,
        data: torch.Tensor,
        last: bool,
        fut: torch.futures.Future[torch.Tensor],
        bucket: dist.GradBucket | None = None,
    ) -> None:
        """Under the lock: bucket b (of the group's layout) of step s is ready."""
        ev = None
        if data.is_cuda:
            ev = torch.cuda.Event()
            ev.record(torch.cuda.current_stream(data.device))
        if bucket is not None and s < self.config.warmup_steps:
            self._warm_layout.setdefault(s, {})[b] = BucketLayout(data.numel(), data.dtype, placed(bucket))
        if s in self._results:  # the round went on without this gradient: keep it for later
            self._pending[b] = data.clone()
            self._pending_from = s
            if data.is_cuda:
                self._pending_ev = self._recorded(torch.cuda.current_stream(data.device))
            self._after_round(s, self._results[s])
            fut.set_result(self._results[s][b])
            return
        self._inbox[(s, b)] = (data, ev, last)
        self._futures[(s, b)] = fut
        if b == 0:
            self._fresh_steps.add(s)
            if s == self._round and self._decided < s and not self._recovering:
                self._register(s)
        self._cv.notify_all()

    def _on_bucket_translated(
        self, s: int, bucket: dist.GradBucket, fut: torch.futures.Future[torch.Tensor]
    ) -> None:
        """Under the lock, on a newcomer: keep DDP's bucket; once the step's last is in, copy the
        gradients into the group's layout and hand those buckets on (DDP waits for its futures only at
        the end of backward, so holding them back until then is allowed)."""
        parts = [(self._param_index[id(p)], o, n) for p, o, n in placed(bucket)]
        step = self._translated.setdefault(s, _Translated())
        step.buckets[bucket.index()] = (bucket.buffer(), parts, fut)
        if not bucket.is_last():
            return
        assert self._remap is not None
        ddp = {b: (data, parts) for b, (data, parts, _) in step.buckets.items()}
        same = self._remap.same_as(ddp)
        self.copied_steps += 1
        self.reordered_steps += not same
        if same and s > self._first_step:
            self._translate = False  # DDP has rebuilt its buckets as the group's: no copies from here on
        inner = []
        bufs = self._remap.to_group(ddp, self.device)
        for j, buf in enumerate(bufs):
            f = _future(buf)
            inner.append(f)
            self._accept(s, j, buf, j == len(bufs) - 1, f)
        if all(f.done() for f in inner):  # the round had gone on without this step's gradient
            self._resolve_translated(s, [f.value() for f in inner])

    def _resolve_translated(self, s: int, outs: list[torch.Tensor] | None) -> None:
        """Under the lock: hand DDP its buckets of step s from the round's result (zeros: an error)."""
        step = self._translated.pop(s, None)
        if step is None:
            return
        for data, parts, fut in step.buckets.values():
            if outs is None:
                fut.set_result(torch.zeros_like(data))
            else:
                assert self._remap is not None  # set with _translate, before the first translated step
                fut.set_result(self._remap.from_group(outs, data, parts))

    def _register(self, s: int) -> None:
        """Under the lock: add this rank to round s of the current epoch (once)."""
        key = (self._epoch, s)
        if key in self._registered:
            return
        self._registered.add(key)
        Plane(self._store(), self._epoch, self._group.ranks, self.rules, self._requests()).register(
            self._view, self.rank, admitting=s + 1 < self.steps, alive=self._request_alive
        )

    def _requests_to_follow(self, store: Store) -> list[str]:
        """The heartbeat thread follows the newest join request of every rank (see _request_alive).
        A newcomer writes its heartbeat key before its request; a key not there (a request written by
        something else) is left out, as multi_get would block on it."""
        keys = [Keys.newcomer_heartbeat(r, t) for r, t in self._requests().newest(store).items()]
        for key in keys:
            if key not in self._followable and store.check([key]):
                self._followable.add(key)
        return [k for k in keys if k in self._followable]

    def _request_alive(self, rank: int, token: str) -> bool:
        """Admit a request only while its process is seen beating: one that died after asking would
        stall every member for collective_timeout_s."""
        key = Keys.newcomer_heartbeat(rank, token)
        if self._liveness.beating(key):
            return True
        silent = self._liveness.followed_silent_for(key)
        if silent is not None and silent >= self.config.dead_after_s and token not in self._refused:
            self._refused.add(token)
            log.warning(
                "autoccl.resilience: not admitting rank %d's join request: its process has not beaten "
                "for %.1f s",
                rank,
                silent,
            )
        return False

    def _recorded(self, stream: torch.cuda.Stream | None) -> torch.cuda.Event | None:
        """An event recorded on the stream now; None where the agent has no stream of its own (then
        everything runs on one stream, in order)."""
        if self._agent_stream is None or stream is None:
            return None
        ev = torch.cuda.Event()
        ev.record(stream)
        return ev

    def _after_round(self, r: int, outs: list[torch.Tensor]) -> None:
        """Round r's results are read on the calling thread's stream from here: with the agent's own
        stream, that stream waits until the round wrote them (they are only complete on the agent's), and
        the allocator keeps them until that stream has read them."""
        ev = self._done_events.get(r)
        if ev is None:
            return
        reader = torch.cuda.current_stream(self.device)
        reader.wait_event(ev)
        for t in outs:
            t.record_stream(reader)

    def _wait_round(self, r: int) -> RoundRecord:
        with self._cv:
            while r not in self._records:
                self._check_error()
                if self._closed:
                    raise ResilienceError("the reducer was closed")
                self._cv.wait(timeout=0.5)
            self._check_error()
            return self._records[r]

    def _update(
        self,
        optimizer: torch.optim.Optimizer,
        before_step: Callable[[], None] | None,
        r: int,
        from_grads: bool,
    ) -> None:
        with self._cv:
            outs = self._results.pop(r)
            layout = self._layout
        if not from_grads:
            self._after_round(r, outs)
            if layout is None:
                raise ResilienceError("a missed round during warm-up cannot be applied (no bucket layout)")
            for lay, out in zip(layout, outs, strict=True):
                for p, off, n in lay.params:
                    g = out[off : off + n].view_as(p)
                    if p.grad is None:
                        p.grad = g.clone()
                    else:
                        p.grad.copy_(g)
        if before_step is not None:
            before_step()
        optimizer.step()
        if not from_grads:
            optimizer.zero_grad(set_to_none=True)

    # ------------------------------------------------------------------------------------- agent

    def _agent_main(self) -> None:
        if self._agent_stream is not None:
            with torch.cuda.stream(self._agent_stream):  # this thread's current stream from here on
                self._agent_loop()
        else:
            self._agent_loop()

    def _agent_loop(self) -> None:
        try:
            self._start_timer(self._epoch, self._view)
            while True:
                with self._cv:
                    if self._closed or self._round >= self.steps:
                        return
                    s = self._round
                    admission = self._admission
                try:
                    if admission is not None:
                        self._admit(admission)
                    self._run_round(s)
                except _Recover as r:
                    self._regroup(r)
        except _Closed:
            return
        except BaseException as e:  # handed to the training thread
            with self._cv:
                self._error = e
                # Backward completes (with zeros) and step() raises the error, so that the training
                # loop sees one ResilienceError rather than an error from inside autograd.
                for key, fut in self._futures.items():
                    if not fut.done():
                        fut.set_result(torch.zeros_like(self._inbox[key][0]))
                self._futures.clear()
                for s in list(self._translated):
                    self._resolve_translated(s, None)
                self._cv.notify_all()
            log.error("autoccl.resilience: rank %d stops: %s", self.rank, e)

    def _plane(self) -> Plane:
        return Plane(self._store(), self._epoch, self._group.ranks, self.rules, self._requests())

    def _alive_or_recover(self, s: int, ranks: tuple[int, ...] | frozenset[int]) -> None:
        if self._liveness.error is not None:
            raise ResilienceError(f"the heartbeat thread failed: {first_line(self._liveness.error)}")
        dead = self._liveness.dead(frozenset(ranks))
        if dead:
            silent = max(self._liveness.silent_for(r) for r in dead)
            raise _Recover(
                f"no heartbeat from rank(s) {sorted(dead)} for {silent:.1f} s", tuple(sorted(dead))
            )

    def _stalled(self, s: int, missing: frozenset[int]) -> _Recover:
        why = f"rank(s) {sorted(missing)} kept step {s} waiting for {self.config.stall_s:.0f} s"
        return _Recover(why, tuple(sorted(missing)))

    def _closed_check(self) -> None:
        if self._closed:
            raise _Closed()

    def _get(self, key: str, timeout_s: float) -> bytes | None:
        """The key's value once written (the store wakes the caller at once), None after timeout_s."""
        store = self._store()
        if getattr(self._tls, "timeout", None) != timeout_s:
            store.set_timeout(datetime.timedelta(seconds=timeout_s))
            self._tls.timeout = timeout_s
        t0 = time.monotonic()
        try:
            return bytes(store.get(key))
        except (dist.DistStoreError, RuntimeError) as e:
            if time.monotonic() - t0 < 0.5 * timeout_s:
                raise ResilienceError(f"the job's key-value store failed: {first_line(e)}") from e
            return None

    def _decide(self, s: int, view: RoundView) -> Decision:
        """Every agent waits for the decision; the coordinator's timer thread writes it when the
        ski-rental budget runs out, the last rank to register when everyone expected is there."""
        if len(view.group) == 1:
            # Nobody to agree with, but the round still waits for this rank's gradient (fresh or late).
            with self._cv:
                while not (self._join or s in self._fresh_steps):
                    self._closed_check()
                    self._cv.wait(timeout=0.5)
            admit = {}
            if s + 1 < self.steps and view.may_admit(view.group, self.rules):
                admit = self._plane().join_requests(self._request_alive)
            return view.decide(view.group, admit=admit)
        plane = self._plane()
        coordinator = view.group[0]
        while True:
            text = self._get(plane.keys.decision(s), self._chunk())
            if text is not None:
                return Decision.decode(text)
            self._closed_check()
            if coordinator != self.rank and not self._liveness.alive(coordinator):
                raise _Recover(f"the coordinator, rank {coordinator}, is lost", (coordinator,))
            timer = self._timer
            if timer is not None and timer.error is not None:
                raise ResilienceError(f"the coordinator's timer failed: {first_line(timer.error)}")
            if self._liveness.error is not None:
                raise ResilienceError(f"the heartbeat thread failed: {first_line(self._liveness.error)}")

    def _chunk(self) -> float:
        """Long waits check liveness this often."""
        return max(self.config.heartbeat_s, self.config.dead_after_s / 2)

    def _start_timer(self, epoch: int, view: RoundView) -> None:
        if view.group[0] != self.rank or len(view.group) == 1:
            self._timer = None
            return
        self._timer = _Timer(self, epoch, view)
        self._timers.append(self._timer)
        self._timer.start()

    def _collective(self, fn: Callable[[], Any]) -> Any:
        """Start a collective; a failure (a lost peer) turns into a recovery."""
        try:
            return fn()
        except (RuntimeError, dist.DistError) as e:
            raise _Recover(f"a collective failed: {first_line(e)}") from e

    def _finish(self, work: Any, s: int) -> None:
        """Wait for a collective, watching the peers' heartbeats (a lost peer may hang it): polled, with
        a pause that doubles from 20 us to 1 ms. No Python callback goes on the work's future: a collective
        left in flight by close() completes later on the backend's thread, and a callback taking the GIL
        there while the interpreter exits aborts the process ("terminate called without an active
        exception", a straggler rank of a CPU test on a loaded machine)."""
        deadline = time.monotonic() + self.config.collective_timeout_s
        pause = 2e-5
        while not work.is_completed():
            if time.monotonic() > deadline:
                raise _Recover(f"a collective of step {s} timed out")
            self._alive_or_recover(s, self._group.ranks)
            if self._closed:
                raise _Closed()
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)
        self._collective(work.wait)

    def _run_round(self, s: int) -> None:
        with self._cv:
            view = self._view
            epoch = self._epoch
            grp = self._group
            if (self._join or s in self._fresh_steps) and (epoch, s) not in self._registered:
                self._register(s)
        t0 = time.monotonic()
        d = self._decide(s, view)
        if d.kind == "recover":
            raise _Recover(d.reason, d.members)
        if self._test_corrupt_view is not None:
            d = self._test_corrupt_view(d)
        member = self.rank in d.members
        with self._cv:
            self._decided = s
            self._decision = d
            fresh = member and s in self._fresh_steps
            stale = member and bool(self._pending)
            pending = dict(self._pending) if stale else {}
            staleness = s - self._pending_from if stale else 0
            pending_ev = self._pending_ev if stale else None
            layout = self._layout
        if not fresh and layout is None:
            raise ResilienceError(f"round {s} has no gradient of this rank and no bucket layout yet")
        n = grp.size
        me = grp.index(self.rank)
        # Who took part, as each rank sees it, summed: every rank checks that all views agree.
        acc = torch.zeros(4 + 3 * n, dtype=torch.float64, device=self.device)
        acc[0], acc[1], acc[2] = s, epoch, 1
        acc[3 + 3 * n] = _admission_code(d)
        for r in d.members:
            acc[3 + grp.index(r)] = 1
        if fresh:
            acc[3 + n + me] = 1
        if stale:
            acc[3 + 2 * n + me] = staleness
        # It runs beside the buckets' all-reduces (one latency less a step); nothing of the round is
        # released before the check has passed.
        self._inflight = [self._collective(partial(dist.all_reduce, acc, group=grp.pg, async_op=True))]
        outs: list[torch.Tensor] = []
        works = self._inflight
        if self._agent_stream is not None and pending_ev is not None:
            self._agent_stream.wait_event(pending_ev)
        b = 0
        while True:
            if fresh:
                data, ev, last = self._take(s, b)
                if ev is not None and self._agent_stream is not None:
                    self._agent_stream.wait_event(ev)  # the GPU waits; the agent issues the next bucket
                elif ev is not None:
                    ev.synchronize()
                buf = data.detach().clone()
                if self._agent_stream is not None and data.is_cuda:
                    data.record_stream(self._agent_stream)  # e.g. a newcomer's remapped bucket, freed early
            else:
                assert layout is not None
                lay = layout[b]
                buf = torch.zeros(lay.numel, dtype=lay.dtype, device=self.device)
                last = b == len(layout) - 1
            if stale:
                buf += pending[b]
            outs.append(buf)
            works.append(self._collective(partial(dist.all_reduce, buf, group=grp.pg, async_op=True)))
            if last:
                break
            b += 1
        if layout is not None and len(outs) != len(layout):
            raise ResilienceError(f"DDP's buckets changed after warm-up ({len(layout)} then {len(outs)})")
        for w in works:
            self._finish(w, s)
        self._inflight = []
        if self.device.type == "cuda":
            torch.cuda.current_stream(self.device).synchronize()
        vals = acc.cpu().tolist()
        self._check_agreement(vals, d, grp, s, epoch)
        fresh_ranks = tuple(grp.ranks[i] for i in range(n) if vals[3 + n + i] > 0.5)
        stale_ranks = {
            grp.ranks[i]: round(vals[3 + 2 * n + i]) for i in range(n) if vals[3 + 2 * n + i] > 0.5
        }
        # The mean of the gradients the round carries (fresh and late ones; the count is the same on
        # every rank): a partial step keeps the size of a full one.
        contributions = max(1, len(fresh_ranks) + len(stale_ranks))
        for buf in outs:
            buf.div_(contributions)
        self._cost.observe_round(time.monotonic() - t0, folded_stale=bool(stale_ranks))
        rec = RoundRecord(
            epoch,
            s,
            d.kind,
            grp.ranks,
            d.members,
            fresh_ranks,
            stale_ranks,
            d.waited_ms,
            d.budget_ms,
            0.0,
            admitted=tuple(sorted(d.admit)),
        )
        self._complete(s, outs, rec, used_pending=stale)
        if self.rank == grp.ranks[0] and s >= _KEEP_ROUNDS:
            self._plane().forget(s - _KEEP_ROUNDS)

    def _take(self, s: int, b: int) -> tuple[torch.Tensor, Any, bool]:
        with self._cv:
            while (s, b) not in self._inbox:
                if self._closed:
                    raise _Closed()
                self._cv.wait(timeout=0.5)
            data, ev, last = self._inbox[(s, b)]
            return data, ev, last

    def _check_agreement(self, vals: list[float], d: Decision, grp: G.Group, s: int, epoch: int) -> None:
        n = grp.size
        problems = []
        if round(vals[2]) != n:
            problems.append(f"{round(vals[2])} of {n} ranks reported")
        if vals[0] != n * s or vals[1] != n * epoch:
            problems.append("ranks are at different rounds")
        for i, r in enumerate(grp.ranks):
            votes = round(vals[3 + i])
            if votes not in (0, n):
                problems.append(f"{votes} of {n} ranks count rank {r} as taking part")
            elif (votes == n) != (r in d.members):
                problems.append(f"rank {r} is {'in' if votes == n else 'out'} for the others")
            if r not in d.members and (vals[3 + n + i] > 0 or vals[3 + 2 * n + i] > 0):
                problems.append(f"rank {r} contributed while left out")
        if vals[3 + 3 * n] != n * _admission_code(d):
            problems.append(f"ranks disagree on who joins after it (this rank: {sorted(d.admit)})")
        if problems:
            raise MembershipDisagreement(
                f"ranks disagree on who took part in step {s} (epoch {epoch}): " + "; ".join(problems)
            )

    def _complete(self, s: int, outs: list[torch.Tensor], rec: RoundRecord, used_pending: bool) -> None:
        # Readers on other streams wait for this (futures by their own events, others in _after_round).
        done = self._recorded(self._agent_stream)
        with self._cv:
            rec.done_s = time.monotonic()
            self._results[s] = outs
            if done is not None:
                self._done_events[s] = done
            self._last_done = (s, outs)
            self._records[s] = rec
            self.records.append(rec)
            for old in [r for r in self._records if r < s - 2 * self.config.max_lag - 2]:
                del self._records[old]
                self._done_events.pop(old, None)  # set with its record, under this lock
            fresh = self.rank in rec.fresh
            for key in [k for k in self._futures if k[0] == s]:
                fut = self._futures.pop(key)
                data, ev, _ = self._inbox.pop(key)
                if not fresh:  # this rank's gradient of step s arrived but missed the round
                    if ev is not None and self._agent_stream is not None:
                        self._agent_stream.wait_event(ev)
                        data.record_stream(self._agent_stream)
                    self._pending[key[1]] = data.clone()
                    self._pending_from = s
                    self._pending_ev = self._recorded(self._agent_stream)
                fut.set_result(outs[key[1]])
            self._resolve_translated(s, outs)
            if used_pending:
                self._pending = {}
                self._pending_from = -1
                self._pending_ev = None
            if self.rank in rec.members:
                self._join = False
            if self._pending_join is not None and self._pending_join[0].round == s:
                # The grown group's first round is done: every rank records the join alike.
                self.joins.append(self._pending_join[0])
                log.warning("autoccl.resilience: %s", self._pending_join[1])
                self._pending_join = None
            self._fresh_steps.discard(s)
            if s == self.config.warmup_steps - 1 and self._layout is None:
                lay = self._warm_layout.get(s, {})
                self._layout = [lay[i] for i in range(len(lay))]
                self._warm_layout.clear()
            assert self._decision is not None
            self._view = self._view.next_view(self._decision)
            self._round = s + 1
            if self._decision.admit and not rec.shared:
                # The next round is the grown group's: registrations count its ranks from now on, and
                # the agent makes its process group before any collective of that round. The epoch
                # stays: a rank that did not finish this round (a loss during it) recovers in this
                # epoch, and one that did joins that recovery in the same epoch once the grown group
                # cannot form (_admit).
                grown = tuple(sorted({*self._group.ranks, *self._decision.admit}))
                self._admission = _Admission(self._epoch, s, dict(self._decision.admit), self._group, grown)
                self._group = G.Group(None, grown, self._group.backend, "forming")
                self._view = RoundView(s + 1, grown, {})
                self._generation += 1
            self._cv.notify_all()

    # ---------------------------------------------------------------------------------- recovery

    def _regroup(self, why: _Recover) -> None:
        """Recover; a further loss once the new group exists starts another recovery in it."""
        watchdog = threading.Timer(
            self.config.recovery_s, self._recovery_hung, args=(self._round, why.reason)
        )
        watchdog.daemon = True
        watchdog.start()
        try:
            while True:
                epoch = self._epoch
                try:
                    self._recover(why)
                    return
                except _Recover as again:
                    if self._epoch == epoch:
                        raise ResilienceError(
                            f"a second failure while the survivors were regrouping: {again.reason}"
                        ) from again
                    why = again
        finally:
            watchdog.cancel()

    def _recovery_hung(self, step: int, reason: str) -> None:
        """A recovery blocked inside a call that never returns (a communicator waiting on the lost
        rank) cannot be interrupted from Python: say where every thread is, then end the process, so
        that a launcher or scheduler sees a failed rank instead of a silent one."""
        stacks = "\n".join(
            f"thread {ident}:\n{''.join(traceback.format_stack(frame))}"
            for ident, frame in sys._current_frames().items()
        )
        log.error(
            "autoccl.resilience: rank %d: the recovery from the failure at step %d (%s) has not finished "
            "after %.0f s (ResilienceConfig.recovery_s); exiting with status %d. Where each thread is:\n%s",
            self.rank,
            step,
            reason,
            self.config.recovery_s,
            RECOVERY_HUNG_EXIT,
            stacks,
        )
        for h in [*log.handlers, *logging.getLogger().handlers]:
            h.flush()
        sys.stderr.flush()
        os._exit(RECOVERY_HUNG_EXIT)

    def _recover(self, why: _Recover) -> None:
        t0 = time.monotonic()
        cfg = self.config
        with self._cv:
            self._recovering = True
            s = self._round
            epoch = self._epoch
            grp = self._group
            decision = self._decision if self._decided == s else None
        log.warning("autoccl.resilience: rank %d: step %d: %s; regrouping", self.rank, s, why.reason)
        plane = self._plane()
        for r in (s, s + 1):  # wake the ranks waiting for these decisions
            plane.propose(recover_decision(r, why.reason, why.suspects))
        store = self._store()
        store.set(plane.keys.census(self.rank), json.dumps({"completed": s - 1}))
        seen: set[int] = set()
        while True:
            for r in grp.ranks:
                if r not in seen and store.check([plane.keys.census(r)]):
                    seen.add(r)
            live = set(grp.ranks) - self._liveness.dead(grp.ranks)
            if live <= seen or time.monotonic() - t0 > cfg.census_s:
                break
            self._closed_check()
            time.sleep(cfg.heartbeat_s / 2)
        sealed = tuple(json.loads(store.compare_set(plane.keys.sealed(), "", json.dumps(sorted(seen)))))
        if self.rank not in sealed:
            raise RankExcluded(
                f"rank {self.rank} was left out of the group that survived a failure at step {s} "
                f"(it answered after the others sealed ranks {list(sealed)})"
            )
        completed = {r: int(json.loads(store.get(plane.keys.census(r)))["completed"]) for r in sealed}
        new = G.survivors_group(
            grp, sealed, self.rank, self._group_store(epoch + 1), cfg.collective_timeout_s, self.device
        )
        lost = tuple(r for r in grp.ranks if r not in sealed)
        with self._cv:
            self._group = new
            self._epoch = epoch + 1
            self._generation += 1
        self._liveness.watch({r: k for r, k in self._liveness.watched.items() if r in sealed})
        top = max(completed.values())
        if any(c < top for c in completed.values()):
            self._share_round(top, completed, new, decision)
        with self._cv:
            self._epoch = epoch + 1
            self._view = RoundView(top + 1, sealed, {})
            self._round = top + 1
            self._decided = top
            self._decision = None
            self._admission = None
            if self._pending_join is not None:
                # The grown group's first round did not end, but the newcomers that survived are in.
                pj = self._pending_join[0]
                kept = tuple(r for r in pj.joined if r in sealed)
                if kept:
                    self.joins.append(Join(pj.epoch, pj.round, kept, pj.group, pj.seconds))
                self._pending_join = None
            self._recovering = False
            self._cv.notify_all()
        self._start_timer(epoch + 1, self._view)
        self._retire(grp, new)
        took = time.monotonic() - t0
        self.recoveries.append(Recovery(epoch + 1, top + 1, lost, sealed, new.how, why.reason, took))
        log.warning(
            "autoccl.resilience: rank(s) %s lost at step %d (%s); continuing with ranks %s from step %d "
            "(%s, %.2f s)",
            list(lost),
            s,
            why.reason,
            list(sealed),
            top + 1,
            new.how,
            took,
        )

    def _meet(self, where: str, size: int) -> None:
        """All `size` processes of a group about to be made arrive at `where` within collective_timeout_s,
        or every one of them learns that they did not (one verdict, first writer wins), before any
        starts to set the group up: a group that waits in its set-up for a process that is gone (NCCL's
        set-up has no time-out of its own) could never be left."""
        store = self._store()
        arrived, verdict_key = f"{where}/arrived", f"{where}/verdict"
        store.add(arrived, 1)
        deadline = time.monotonic() + self.config.collective_timeout_s
        while True:
            if store.check([verdict_key]):
                verdict = bytes(store.get(verdict_key)).decode()
            elif int(store.add(arrived, 0)) >= size:
                verdict = bytes(store.compare_set(verdict_key, "", "met")).decode()
            elif time.monotonic() > deadline:
                verdict = bytes(store.compare_set(verdict_key, "", "failed")).decode()
            else:
                self._closed_check()
                time.sleep(self.config.heartbeat_s / 4)
                continue
            if verdict == "met":
                return
            raise RuntimeError(
                f"not every process of the group arrived within {self.config.collective_timeout_s} s"
            )

    def _group_store(self, epoch: int, grown_after: int | None = None) -> Any:
        """The store prefix where the survivors' group of `epoch` meets, or the group grown after round
        `grown_after` (its own client: the group keeps it)."""
        where = "pg" if grown_after is None else f"grown-{grown_after}"
        return dist.PrefixStore(f"{self._prefix}e{epoch}/{where}", self._base.clone())

    # ----------------------------------------------------------------------------------- joining

    def _enter(self, optimizer: torch.optim.Optimizer) -> None:
        """A newcomer: ask to join, wait for the admission, meet the grown group, take its state. If the
        grown group does not form (a member was lost meanwhile: the members recover without it), ask
        again, until admission_s."""
        cfg = self.config
        t0 = time.monotonic()
        deadline = t0 + cfg.admission_s
        attempt = 0
        while True:
            token = f"{self._token}-{attempt}"
            if attempt:  # a key per request: the members that saw the last one fail see it go silent
                beat = Keys.newcomer_heartbeat(self.rank, token)
                self._store().add(beat, 1)
                self._liveness.rekey(beat)
            adm = self._ask(token, deadline)
            group = tuple(int(r) for r in adm["group"])
            epoch, first = int(adm["epoch"]), int(adm["round"])
            self.rules = Rules(cfg.warmup_steps, cfg.max_absent, cfg.max_lag, int(adm["floor"]))
            self._liveness.watch({int(r): str(k) for r, k in adm["heartbeats"].items()})
            grp: G.Group | None = None
            try:
                self._meet(f"e{epoch}/grown-{first - 1}", len(group))
                grp = G.direct(
                    str(adm["backend"]),
                    self._group_store(epoch, first - 1),
                    group,
                    self.rank,
                    cfg.collective_timeout_s,
                    "grown",
                    self.device,
                )
                receive_state(grp, int(adm["source"]), self._module, optimizer, self.device)
                break
            except (RuntimeError, dist.DistError) as e:
                log.warning(
                    "autoccl.resilience: rank %d could not join ranks %s after step %d (%s); asking again",
                    self.rank,
                    list(group),
                    first - 1,
                    first_line(e),
                )
                if grp is not None:
                    G.release(grp)
                self._liveness.watch({self.rank: self._liveness.key})
                attempt += 1
        self._group = grp
        self._layout = decode_layout(adm["layout"], list(self._module.parameters()))
        self._remap = Remap(self._layout, self._param_index)
        self._epoch = epoch
        self._view = RoundView(first, group, {})
        self._round = self._next_step = self._first_step = first
        self._decided = self._applied = first - 1
        self._translate = True
        took = time.monotonic() - t0
        joiners = tuple(int(r) for r in adm.get("joiners", [self.rank]))
        self._pending_join = (
            Join(epoch, first, joiners, group, took),
            f"rank {self.rank} joined ranks {list(group)} at step {first} ({took:.2f} s after asking)",
        )
        log.warning(
            "autoccl.resilience: rank %d entered ranks %s before step %d", self.rank, list(group), first
        )

    def _ask(self, token: str, deadline: float) -> dict[str, Any]:
        """Post a join request and wait for its admission (the admission record)."""
        cfg = self.config
        store = self._store()
        i = int(store.add(Keys.join_count(), 1)) - 1
        store.set(Keys.join_request(i), json.dumps({"rank": self.rank, "token": token}))
        log.warning("autoccl.resilience: rank %d asks to join the running job", self.rank)
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ResilienceError(
                    f"rank {self.rank} was not admitted within {cfg.admission_s:.0f} s (admission_s); "
                    "the group admits newcomers after a step that every member takes part in, and only "
                    "where every rank's Reducer was given the same store as this one"
                )
            if self._liveness.error is not None:
                raise ResilienceError(f"the heartbeat thread failed: {first_line(self._liveness.error)}")
            if store.check([Keys.run_ended()]):
                raise RunEnded(f"rank {self.rank} asked to join a run that has ended")
            text = self._get(Keys.admission(self.rank), min(self._chunk(), left))
            if text is not None:
                found: dict[str, Any] = json.loads(text)
                if found.get("token") == token:
                    return found
                time.sleep(cfg.heartbeat_s)  # the admission of an earlier request or process of this rank

    def _admit(self, adm: _Admission) -> None:
        """A member: grow the group by the newcomers admitted after round adm.round. The source writes
        their admissions; everyone meets in the grown group's process group; the source sends each
        newcomer the weights and the optimizer's state once its own step() has applied the round."""
        t0 = time.monotonic()
        cfg = self.config
        joiners = tuple(sorted(adm.joiners))
        # A newcomer that dies while joining is seen as lost (its process's own heartbeat key).
        beats = {
            **self._liveness.watched,
            **{r: Keys.newcomer_heartbeat(r, t) for r, t in adm.joiners.items()},
        }
        self._liveness.watch(beats)
        if self.rank == adm.source:
            assert self._layout is not None
            layout = encode_layout(self._layout, self._param_index)
            for r, token in adm.joiners.items():
                admission = {
                    "token": token,
                    "epoch": adm.epoch,
                    "round": adm.round + 1,
                    "group": list(adm.ranks),
                    "source": adm.source,
                    "backend": adm.previous.backend,
                    "floor": self.rules.members_floor,
                    "heartbeats": {str(r): k for r, k in beats.items()},
                    "joiners": list(joiners),
                    "layout": layout,
                }
                self._store().set(Keys.admission(r), json.dumps(admission))
        try:
            self._meet(f"e{adm.epoch}/grown-{adm.round}", len(adm.ranks))
            new = G.direct(
                adm.previous.backend,
                self._group_store(adm.epoch, adm.round),
                adm.ranks,
                self.rank,
                cfg.collective_timeout_s,
                "grown",
                self.device,
            )
        except (RuntimeError, dist.DistError) as e:
            # Recover in this epoch with the group of the admitting round: the members that did not
            # finish it (if one was lost) are recovering there already.
            with self._cv:
                self._group = adm.previous
                self._admission = None
                self._cv.notify_all()
            raise _Recover(
                f"the group grown by rank(s) {list(joiners)} after step {adm.round} did not form: "
                f"{first_line(e)}",
                tuple(sorted(self._liveness.dead(adm.ranks))),
            ) from e
        with self._cv:
            self._group = new
        G.release(adm.previous)  # every member met in the new group, so each has finished the old one's round
        if self.rank == adm.source:
            with self._cv:
                while self._applied < adm.round:
                    self._closed_check()
                    self._cv.wait(timeout=0.5)
                optimizer = self._optimizer
            assert optimizer is not None
            try:
                for r in joiners:
                    send_state(new, r, self._module, optimizer, self.device)
            except (RuntimeError, dist.DistError) as e:
                raise _Recover(
                    f"sending the state to rank(s) {list(joiners)} failed: {first_line(e)}", joiners
                ) from e
        with self._cv:
            self._admission = None
            self._cv.notify_all()
        self._start_timer(adm.epoch, RoundView(adm.round + 1, new.ranks, {}))
        took = time.monotonic() - t0
        self._pending_join = (
            Join(adm.epoch, adm.round + 1, joiners, new.ranks, took),
            f"rank(s) {list(joiners)} joined after step {adm.round}; continuing with ranks "
            f"{list(new.ranks)} from step {adm.round + 1} ({took:.2f} s)",
        )

    def _retire(self, old: G.Group, new: G.Group) -> None:
        """Let the old group's stranded collectives end, then destroy it. A survivor that caught the
        loss by heartbeat may still wait inside a collective of the old group; it ends (with an error)
        once the peers it waits on close their connections, which destroying the group does on the
        survivors with nothing pending. A collective left pending when the process exits aborts it."""
        stranded, self._inflight = self._inflight, []
        if new.how == "shrink_group" or old.pg is new.pg or old.backend == "nccl":
            return  # shrink_group or survivors_group (NCCL) took the old communicator down first
        deadline = time.monotonic() + self.config.collective_timeout_s
        for w in stranded:
            while not w.is_completed() and time.monotonic() < deadline:
                time.sleep(0.01)
        G.release(old)

    def _share_round(
        self, r: int, completed: dict[int, int], new: G.Group, decision: Decision | None
    ) -> None:
        """Some survivors finished round r before the failure and may have applied it: the others get
        its result from the lowest of them, so that every survivor applies the same update."""
        src = min(x for x, c in completed.items() if c == r)
        with self._cv:
            layout = self._layout
            have = self._last_done if self._last_done is not None and self._last_done[0] == r else None
        if layout is None:
            raise ResilienceError("a rank was lost during the warm-up steps; that is not survivable")
        if have is not None:
            bufs = have[1]
        else:
            bufs = [torch.zeros(lay.numel, dtype=lay.dtype, device=self.device) for lay in layout]
        for buf in bufs:
            self._collective(partial(dist.broadcast, buf, group=new.pg, group_src=new.index(src)))
        if have is None:
            if decision is None or decision.round != r:
                raise ResilienceError(f"rank {self.rank} lost the decision of step {r} during a failure")
            with self._cv:
                fresh = self.rank in decision.members and r in self._fresh_steps
                stale = self.rank in decision.members and bool(self._pending)
            rec = RoundRecord(
                self._epoch - 1,
                r,
                decision.kind,
                tuple(completed),
                decision.members,
                (self.rank,) if fresh else (),
                {},
                decision.waited_ms,
                decision.budget_ms,
                0.0,
                shared=True,
            )
            with self._cv:
                self._decision = decision
            self._complete(r, bufs, rec, used_pending=stale)


class _Timer(threading.Thread):
    """The coordinator's clock (a thread of the group's lowest rank, one per epoch): once the quorum of
    a round is ready it sleeps through the ski-rental budget, then writes a partial decision unless the
    round was decided meanwhile; it also turns a lost rank into a recovery decision."""

    def __init__(self, red: Reducer, epoch: int, view: RoundView) -> None:
        super().__init__(name=f"autoccl-coordinator-{red.rank}", daemon=True)
        self.red = red
        self.epoch = epoch
        self.generation = red._generation  # its group's: a recovery or an admission ends this clock
        self.view = view
        self.error: BaseException | None = None
        self._last: tuple[int, float, float] | None = None  # (round, quorum time, waited)

    def run(self) -> None:
        red = self.red
        try:
            while self._live() and self.view.round < red.steps:
                plane = Plane(red._store(), self.epoch, self.view.group, red.rules, red._requests())
                d = self._round(plane, self.view)
                if d is None or d.kind == "recover" or d.admit:
                    return  # an admitting round: the next round is the grown group's (a new clock)
                self.view = self.view.next_view(d)
        except BaseException as e:
            self.error = e

    def _live(self) -> bool:
        red = self.red
        return not red._closed and red._epoch == self.epoch and red._generation == self.generation

    def _lost(self, plane: Plane, s: int) -> Decision | None:
        red = self.red
        dead = red._liveness.dead(frozenset(self.view.group))
        if not dead:
            return None
        silent = max(red._liveness.silent_for(r) for r in dead)
        why = f"no heartbeat from rank(s) {sorted(dead)} for {silent:.1f} s"
        return plane.propose(recover_decision(s, why, dead))

    def _round(self, plane: Plane, view: RoundView) -> Decision | None:
        red, cfg, s = self.red, self.red.config, view.round
        exp = view.expected(red.rules)
        t0 = time.monotonic()
        while red._get(plane.keys.quorum(s), red._chunk()) is None:
            if not self._live():
                return None
            lost = self._lost(plane, s)
            if lost is not None:
                return lost
            missing = exp - plane.present(s)
            if time.monotonic() - t0 > cfg.stall_s and missing:
                return plane.propose(recover_decision(s, red._stalled(s, missing).reason, missing))
        t_q = time.monotonic()
        if self._last is not None and self._last[0] == s - 1 and s >= 3:  # DDP settles in steps 0-1
            # the step period of the group, without the time it chose to wait for late ranks
            red._cost.observe_step(t_q - self._last[1] - self._last[2])
        budget = math.inf
        if s >= red.rules.warmup_steps:
            absent = len(exp - plane.present(s))
            budget = red._rule.wait_s(red._cost.value(absent, len(view.group)))
        piece = max(1e-3, budget / 8)
        while True:
            if math.isfinite(budget):
                d = plane.decided(s)
            else:  # nothing to time: block until the round is decided
                text = red._get(plane.keys.decision(s), red._chunk())
                d = Decision.decode(text) if text is not None else None
            now = time.monotonic()
            if d is not None:
                # the period excludes the wait for late ranks, whoever ended it
                self._last = (s, t_q, now - t_q)
                return d
            if not self._live():
                return None
            lost = self._lost(plane, s)
            if lost is not None:
                return lost
            if now >= t_q + budget:
                present = plane.present(s)
                if view.may_proceed(present, red.rules):
                    waited = now - t_q
                    d = plane.propose(view.decide(present, waited_ms=waited * 1e3, budget_ms=budget * 1e3))
                    self._last = (s, t_q, waited)
                    return d
            if now - t_q > cfg.stall_s:
                missing = exp - plane.present(s)
                if missing:
                    return plane.propose(recover_decision(s, red._stalled(s, missing).reason, missing))
            if math.isfinite(budget):
                time.sleep(min(piece, max(1e-4, t_q + budget - now)) if now < t_q + budget else piece)


def _admission_code(d: Decision) -> float:
    """The newcomers a decision admits as one number every rank adds up (the agreement check): a CRC-32
    of the sorted ranks, so a sum of n of them is exact in float64 for n < 2**21 ranks."""
    return float(zlib.crc32(json.dumps(sorted(d.admit)).encode()))
