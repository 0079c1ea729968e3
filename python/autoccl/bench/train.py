"""`autoccl bench train`: a GPT-style decoder (random init, synthetic tokens) trained with FSDP2
(`fully_shard`: all-gather + reduce-scatter) or DDP (bucketed all-reduce); one time per iteration."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from autoccl.bench.presets import PRESETS, Preset


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
    g = torch.Generator(device=device)
    g.manual_seed(spec["seed"] * 7919 + rank)
    b, t = spec["batch"], spec["seq"]
    timer = Timer(device)
    iters = int(spec["iters"])
    marks = [timer.mark()]
    losses: list[torch.Tensor] = []
    for i in range(iters):
        tokens = torch.randint(0, p.vocab, (b, t + 1), generator=g, device=device)
        with torch.autocast(device.type, dtype=dtype, enabled=autocast):
            logits = net(tokens[:, :-1])
            loss = F.cross_entropy(logits.float().view(-1, p.vocab), tokens[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        marks.append(timer.mark())
        if i in (0, iters - 1):
            losses.append(loss.detach())
        if (i + 1) % 10 == 0 or i + 1 == iters:
            if device.type == "cuda":
                marks[-1].synchronize()
            progress(i + 1, iters)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    local = [timer.between_ms(marks[i], marks[i + 1]) for i in range(iters)]
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
    return out
