"""`autoccl bench train`: a GPT-style decoder (random init, synthetic tokens) trained with FSDP2
(`fully_shard`: all-gather + reduce-scatter) or DDP (bucketed all-reduce); one time per iteration."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from autoccl.bench import exposure_truth as ET
from autoccl.bench.presets import PRESETS, Preset
from autoccl.bench.stall import StallReport


class Block(nn.Module):
    def __init__(self, p: Preset) -> None:
        super().__init__()
        self.heads = p.heads
        self.ln1 = nn.LayerNorm(p.d_model)
        self.qkv = nn.Linear(p.d_model, 3 * p.d_model)
        self.proj = nn.Linear(p.d_model, p.d_model)
        self.ln2 = nn.LayerNorm(p.d_model)
        self.fc = nn.Linear(p.d_model, 4 * p.d_model)
        self.out = nn.Linear(4 * p.d_model, p.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, p: Preset) -> None:
        super().__init__()
        self.tok = nn.Embedding(p.vocab, p.d_model)
        self.pos = nn.Embedding(p.max_seq, p.d_model)
        self.blocks = nn.ModuleList(Block(p) for _ in range(p.layers))
        self.ln = nn.LayerNorm(p.d_model)
        self.head = nn.Linear(p.d_model, p.vocab, bias=False)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.zeros_(m.bias)
        for blk in self.blocks:
            assert isinstance(blk, Block)
            nn.init.normal_(blk.proj.weight, std=0.02 / math.sqrt(2 * p.layers))
            nn.init.normal_(blk.out.weight, std=0.02 / math.sqrt(2 * p.layers))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))  # type: ignore[no-any-return]


class MarkovTokens:
    """Token sequences from a fixed random first-order Markov chain (the same on every rank for a seed):
    each token has `fanout` likely successors, so a model can learn it and its loss falls from
    ln(vocab) towards the chain's entropy. Random tokens (the default data) teach nothing, which makes
    them useless for comparing how well two runs train."""

    PROBS = (0.55, 0.25, 0.15, 0.05)

    def __init__(self, vocab: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.succ = torch.randint(0, vocab, (vocab, len(self.PROBS)), generator=g)
        self.probs = torch.tensor(self.PROBS, dtype=torch.float64)

    def entropy(self) -> float:
        """Nats per token of the chain: the lowest loss a model can reach."""
        p = self.probs
        return float(-(p * p.log()).sum())

    def batch(self, b: int, t: int, g: torch.Generator) -> torch.Tensor:
        choice = torch.multinomial(self.probs.expand(b, -1), t, replacement=True, generator=g)
        x = torch.empty(b, t, dtype=torch.long)
        x[:, 0] = torch.randint(0, self.vocab, (b,), generator=g)
        for i in range(1, t):
            x[:, i] = self.succ[x[:, i - 1], choice[:, i]]
        return x


class ProfileWindow:
    """`--torch-profile N`: torch.profiler over iterations [iters - N - 2, iters - 1) of the plain loop. The
    first of them is the profiler's warm-up (not recorded), the N after it are recorded with a
    `ProfilerStep#` span each, and the last iteration runs unprofiled. Starting the profiler, and stopping it
    (Kineto collects and processes the events then), is host work between iterations that `before` and
    `after` report, so the caller starts the next iteration's clock after it: no iteration outside the
    window carries it. The window's own iterations are slower (the profiler records every op and kernel)."""

    def __init__(self, active: int, iters: int, device: torch.device) -> None:
        self.active = active
        self.window = ET.profiled_iterations(iters, active)  # the steps' statistics leave the same out
        self.first = self.window[0] if self.window else -1  # the warm-up iteration
        self.device = device
        self.prof: Any = None
        self.done = False

    @property
    def iterations(self) -> list[int]:
        """[first, end) of the profiled iterations, the warm-up included."""
        return list(self.window) if self.window else []

    def before(self, i: int) -> bool:
        """Starts the profiler before the warm-up iteration; True when it did (host work done here)."""
        if self.active <= 0 or i != self.first:
            return False
        from torch.profiler import ProfilerActivity, profile, schedule

        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device.type == "cuda" else [])
        self.prof = profile(
            activities=acts, schedule=schedule(wait=0, warmup=1, active=self.active, repeat=1)
        )
        self.prof.start()
        return True

    def after(self, i: int) -> bool:
        """Ends iteration i's profiler step; True when that stopped the profiler (host work done here)."""
        if self.prof is None or self.done:
            return False
        self.prof.step()  # the step after the last recorded one stops the trace (schedule's repeat=1)
        if i < self.first + self.active:  # the warm-up or a recorded iteration before the last
            return False
        self.prof.stop()
        self.done = True
        return True

    def export(self, path: Path) -> None:
        self.prof.export_chrome_trace(str(path))


def profile_truth(window: ProfileWindow, spec: dict[str, Any], rank: int) -> dict[str, Any]:
    """Writes this rank's Chrome trace beside the launch's result (`exposure_truth.profile_name`) and, on
    rank 0, returns the ground truth of which NCCL calls the profiled steps waited for."""
    path = Path(spec["out"]).parent / ET.profile_name(str(spec.get("launch", spec["parallel"])), rank)
    window.export(path)
    if rank != 0:
        return {}
    try:
        truth = ET.truth_of_file(path).to_json(max_iterations=window.active)
    except (ValueError, KeyError, TypeError) as e:  # a trace it cannot read costs the truth, not the run
        truth = {"reason": f"the profile could not be read: {e}", "positions": [], "kernels": []}
    truth.update({"profile": str(path), "profiled_iters": window.iterations})
    return {"exposure_truth": truth}


@dataclass
class Timer:
    device: torch.device

    def mark(self) -> Any:
        if self.device.type == "cuda":
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def between_ms(self, a: Any, b: Any) -> float:
        if isinstance(a, float):
            return (b - a) * 1e3
        return float(a.elapsed_time(b))


def run_train(
    spec: dict[str, Any],
    rank: int,
    world: int,
    device: torch.device,
    meta: Any,
    progress: Callable[[int, int], None],
) -> dict[str, Any]:
    p = PRESETS[spec["preset"]]
    if spec["seq"] > p.max_seq:
        raise SystemExit(f"--seq {spec['seq']} exceeds the preset's context {p.max_seq}")
    torch.manual_seed(spec["seed"])
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[spec["dtype"]]
    model = GPT(p).to(device)
    params = sum(x.numel() for x in model.parameters())
    par = spec["parallel"]
    autocast = False
    if par == "fsdp2":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        # The mesh of the device asked for: fully_shard's default mesh is on the machine's accelerator, so
        # with fewer GPUs than ranks a CPU run failed (rank 1: CUDA invalid device ordinal on one H100).
        mesh = init_device_mesh(device.type, (world,))
        mp = (
            MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
            if dtype != torch.float32
            else MixedPrecisionPolicy()
        )
        for blk in model.blocks:
            fully_shard(blk, mesh=mesh, mp_policy=mp)
        fully_shard(model, mesh=mesh, mp_policy=mp)
        net: nn.Module = model
    elif par == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        net = DDP(
            model,
            device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=int(spec.get("bucket_mb", 25)),
        )
        autocast = dtype != torch.float32
    else:
        raise SystemExit(f"unknown parallelism {par!r}")
    opt = torch.optim.AdamW(net.parameters(), lr=float(spec.get("lr", 3e-4)))
    comparison = spec.get("resilience", "off") != "off" or spec.get("straggler") or spec.get("kill")
    if comparison or spec.get("data", "random") != "random":
        return _run_steps(spec, p, rank, world, device, meta, progress, model, net, opt, dtype, autocast)
    g = torch.Generator(device=device)
    g.manual_seed(spec["seed"] * 7919 + rank)
    b, t = spec["batch"], spec["seq"]
    timer = Timer(device)
    iters = int(spec["iters"])
    window = ProfileWindow(int(spec.get("torch_profile", 0)), iters, device)
    spans: list[tuple[Any, Any]] = []  # (start, end) mark of each iteration
    start = timer.mark()
    losses: list[torch.Tensor] = []
    for i in range(iters):
        if window.before(i):
            start = timer.mark()
        tokens = torch.randint(0, p.vocab, (b, t + 1), generator=g, device=device)
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            logits = net(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, p.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        end = timer.mark()
        spans.append((start, end))
        start = timer.mark() if window.after(i) else end
        if i in (0, iters - 1):
            losses.append(loss.detach())
        if (i + 1) % 10 == 0 or i + 1 == iters:
            if device.type == "cuda":
                end.synchronize()
            progress(i + 1, iters)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    local = [timer.between_ms(a, z) for a, z in spans]
    tt = torch.tensor(local, dtype=torch.float64)
    dist.all_reduce(tt, op=dist.ReduceOp.MAX, group=meta)
    out: dict[str, Any] = {
        "iter_ms": tt.tolist(),
        "params": params,
        "loss_first": float(losses[0]),
        "loss_last": float(losses[-1]),
    }
    if device.type == "cuda":
        out["max_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    if window.prof is not None:
        out.update(profile_truth(window, spec, rank))
    return out


def _step_batch(
    spec: dict[str, Any], p: Preset, data: MarkovTokens | None, rank: int, step: int
) -> torch.Tensor:
    """The batch of (rank, step), the same in every run of a command: a rank that skips steps (the
    resilient reducer's late rank) does not shift the data of the steps after."""
    g = torch.Generator().manual_seed(int(spec["seed"]) * 7919 + rank * 100_003 + step)
    b, t = int(spec["batch"]), int(spec["seq"])
    if data is not None:
        return data.batch(b, t + 1, g)
    return torch.randint(0, p.vocab, (b, t + 1), generator=g)


def _weights_identical(model: nn.Module, group: Any, device: torch.device) -> bool:
    """Every rank of `group` holds bit-identical parameters (SHA-256 of the flat parameters)."""
    import hashlib

    h = hashlib.sha256()
    for prm in model.parameters():
        t = prm.detach()
        t = t.to_local() if hasattr(t, "to_local") else t  # FSDP2 shards: this rank's part
        h.update(t.float().cpu().numpy().tobytes())
    words = torch.tensor(
        [int.from_bytes(h.digest()[i : i + 8], "little", signed=True) for i in range(0, 32, 8)],
        dtype=torch.int64,
        device=device,
    )
    hi, lo = words.clone(), -words
    dist.all_reduce(hi, op=dist.ReduceOp.MAX, group=group)
    dist.all_reduce(lo, op=dist.ReduceOp.MAX, group=group)
    return bool(torch.equal(hi, -lo))


def _run_steps(
    spec: dict[str, Any],
    p: Preset,
    rank: int,
    world: int,
    device: torch.device,
    meta: Any,
    progress: Callable[[int, int], None],
    model: nn.Module,
    net: nn.Module,
    opt: torch.optim.Optimizer,
    dtype: torch.dtype,
    autocast: bool,
) -> dict[str, Any]:
    """The loop of a resilience comparison: per-(rank, step) batches, optional Markov data, the
    resilient reducer (DDP), a straggler and a lost rank; per-step loss and step time."""
    import datetime
    import os
    import signal
    import statistics

    from autoccl.resilience.inject import Kill, Straggler, delay

    iters = int(spec["iters"])
    inject = bool(spec.get("inject"))
    straggler = Straggler.parse(spec["straggler"]) if inject and spec.get("straggler") else None
    kill = Kill.parse(spec["kill"]) if inject and spec.get("kill") else None
    busy = spec.get("delay", "busy") == "busy"
    data = MarkovTokens(p.vocab, int(spec["seed"])) if spec.get("data") == "markov" else None
    reducer = None
    if spec.get("resilient"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        from autoccl.resilience import ResilienceConfig
        from autoccl.resilience.reducer import Reducer

        cfg = ResilienceConfig(**spec.get("resilience_config", {}))
        assert isinstance(net, DDP)  # the CLI allows --resilience with --parallel ddp only
        if spec.get("rejoin") and inject:
            # Every rank meets in the launcher's store itself: a replacement worker cannot name the
            # default group's prefix of it.
            from autoccl.resilience import RunEnded
            from autoccl.resilience.reducer import Newcomer

            job_store = dist.TCPStore(
                os.environ["MASTER_ADDR"],
                int(os.environ["MASTER_PORT"]),
                None,
                False,
                datetime.timedelta(seconds=float(spec.get("timeout_s", 600))),
            )
            joining = Newcomer(rank, opt) if spec.get("newcomer") else None
            try:
                reducer = Reducer(net, iters, cfg, store=job_store, newcomer=joining)
            except RunEnded:  # started too late: the run it would replace a rank of is over
                print(f"rank {rank}: the run ended before this replacement worker was admitted", flush=True)
                return {"writer": -1}
            if joining is not None:
                print(f"rank {rank}: joined at step {reducer.next_step} (--rejoin)", flush=True)
        else:
            reducer = Reducer(net, iters, cfg)
    # The same in both modes: the straggler is slowed from step INJECT_FROM on, and mean step times
    # skip the first TIMED_FROM steps (start-up: DDP's bucket rebuild, the reducer's warm-up).
    inject_from, timed_from = 5, min(10, iters // 2)
    losses: dict[int, torch.Tensor] = {}
    done: dict[int, float] = {}  # step -> when its update was applied here (synchronous runs)
    undelayed: list[float] = []
    t_start = time.monotonic()
    # a step this long writes every thread's stack to the rank's log: where a survivor waits after a
    # recovery, read in the log instead of guessed (`--stall-report-s`)
    stall_report_s = float(spec.get("stall_report_s", 20.0))
    stall = StallReport() if reducer is not None else None
    step = reducer.next_step if reducer is not None else 0
    while step < iters:
        # `>=`: a rank whose gradient missed its round skips the steps the group computed meanwhile,
        # so it can jump over the kill step itself. A replacement worker is not killed again.
        if kill is not None and rank == kill.rank and step >= kill.step and not spec.get("newcomer"):
            print(f"rank {rank}: killed at step {step} (--kill {kill.label()})", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        t0 = time.perf_counter()
        if stall is not None:
            stall.arm(stall_report_s)
        tokens = _step_batch(spec, p, data, rank, step).to(device)
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            logits = net(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, p.vocab), tokens[:, 1:].reshape(-1))
        f = straggler.factor(int(spec["seed"]), step) if straggler and rank == straggler.rank else 1.0
        if f > 1.0 and step >= inject_from and undelayed:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            delay((f - 1.0) * statistics.median(undelayed), busy)
        loss.backward()
        losses[step] = loss.detach()
        lagged = False
        if reducer is None:
            opt.step()
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            done[step] = time.monotonic()
            step += 1
        else:
            lagged = reducer.step(opt).lagged
            step = reducer.next_step
        opt.zero_grad(set_to_none=True)
        if stall is not None:
            stall.disarm()
        if f == 1.0 and not lagged:
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            undelayed.append(time.perf_counter() - t0)
        if step % 10 == 0 or step >= iters:
            progress(min(step, iters), iters)
    if stall is not None:
        stall.close()
    out: dict[str, Any] = {"params": sum(x.numel() for x in model.parameters())}
    if reducer is not None:
        reducer.close()
        group, live = reducer.process_group, list(reducer.ranks)
        joined = {r for j in reducer.joins for r in j.joined}
        out["writer"] = min(r for r in live if r not in joined)
        if spec.get("newcomer"):  # its record starts where it joined; the writer reports the run
            out["weights_identical"] = _weights_identical(model, group, device)
            out["live_ranks"], out["_group"] = live, group
            return out
        done = {r.round: r.done_s for r in reducer.records}
        out["resilience"] = reducer.stats()
        out["records"] = [r.as_dict() for r in reducer.records if r.kind != "sync" or r.stale or r.shared]
        red_dev = device
    else:
        group, live, red_dev = meta, list(range(world)), torch.device("cpu")
    times = [t_start] + [done[i] for i in range(iters)]
    out["iter_ms"] = [(times[i + 1] - times[i]) * 1e3 for i in range(iters)]
    tail = out["iter_ms"][timed_from:]
    out["mean_step_ms"] = sum(tail) / len(tail) if tail else math.nan
    out["loss"] = [float(losses[i]) if i in losses else None for i in range(iters)]
    got = [x for x in out["loss"] if x is not None]
    out["loss_first"], out["loss_last"] = got[0], got[-1]
    if data is not None:
        with torch.no_grad(), torch.autocast(device.type, dtype=dtype, enabled=autocast):
            ge = torch.Generator().manual_seed(int(spec["seed"]) + 999)
            evals = []
            for _ in range(4):
                x = data.batch(16, int(spec["seq"]) + 1, ge).to(device)
                lg = model(x[:, :-1]).float()
                evals.append(float(F.cross_entropy(lg.view(-1, p.vocab), x[:, 1:].reshape(-1))))
        out["eval_loss"] = sum(evals) / len(evals)
        out["loss_floor"] = data.entropy()
    out["weights_identical"] = _weights_identical(model, group, red_dev)
    out["live_ranks"] = live
    out.setdefault("writer", min(live))
    if straggler is not None:  # the draws depend on (seed, step) only: the same in every launch
        seed = int(spec["seed"])
        out["straggler_plan"] = {
            str(i): round(straggler.factor(seed, i), 3)
            for i in range(inject_from, iters)
            if straggler.factor(seed, i) > 1.0
        }
    out["_group"] = group
    if device.type == "cuda":
        out["max_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return out
