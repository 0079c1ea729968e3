#!/usr/bin/env python3
"""Collective results under the tuner vs plain NCCL, checked on every iteration.

Run under torchrun (one process per GPU), once with plain NCCL and once under `autoccl run`:

    torchrun --nproc-per-node $NGPU benchmarks/torch_check/equivalence.py --out plain.json
    autoccl run --mode online -- \\
        torchrun --nproc-per-node $NGPU benchmarks/torch_check/equivalence.py --out tuned.json
    python3 benchmarks/torch_check/equivalence.py --compare plain.json tuned.json

Every iteration checks all_gather_into_tensor, reduce_scatter_tensor and all_reduce against a reference
each rank computes locally from the (seeded) inputs of all ranks:
  * integer-valued fp32 inputs: sums are exact in any reduction order, so results must match bit for bit;
  * random-normal fp32 and bf16 inputs: gathers exact, reductions within the tolerance of a different order.
Digests of every output are written so the two runs can be compared exactly (gathers and integer reductions)
and by norm (float reductions). Iterations run while the tuner explores configurations, so a wrong result
under any candidate configuration is caught.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

SIZES_MB = (1, 4, 16, 64, 256)


def _inputs(torch, kind: str, rank: int, numel: int, step: int, device):  # type: ignore[no-untyped-def]
    # Generated on the GPU (fast); every rank regenerates every rank's input from the same seed.
    g = torch.Generator(device=device).manual_seed(1_000_003 * rank + 7919 * step + numel)
    if kind == "int":
        return torch.randint(-8, 9, (numel,), generator=g, device=device).to(torch.float32)
    x = torch.randn(numel, generator=g, device=device)
    return x.to(torch.bfloat16) if kind == "bf16" else x


def _digest(torch, t) -> str:  # type: ignore[no-untyped-def]
    """Position-weighted checksum of the raw bits, computed on the GPU (cheap enough for every output)."""
    bits = t.contiguous().view(torch.int16).to(torch.int64)
    weights = (
        torch.arange(bits.numel(), device=t.device, dtype=torch.int64).mul_(2654435761).remainder_(2**31 - 1)
    )
    return f"{int((bits * weights).sum())}:{bits.numel()}"


def run(args: argparse.Namespace) -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dev = torch.device("cuda", local)
    failures: list[str] = []
    digests: dict[str, str] = {}
    norms: dict[str, float] = {}
    for step in range(args.iters):
        for mb in SIZES_MB:
            for kind in ("int", "f32", "bf16"):
                esize = 2 if kind == "bf16" else 4
                numel = (mb << 20) // esize // world * world
                shard = numel // world
                xs = [_inputs(torch, kind, r, numel, step, dev) for r in range(world)]
                mine = xs[rank]
                tag = f"{kind}/{mb}MB/{step}"
                # all_gather_into_tensor: each rank contributes its first shard; exact everywhere.
                out = torch.empty(numel, dtype=mine.dtype, device=dev)
                dist.all_gather_into_tensor(out, mine[:shard].contiguous())
                ref = torch.cat([x[:shard] for x in xs])
                if not torch.equal(out, ref):
                    failures.append(f"all_gather {tag}")
                digests[f"ag/{tag}"] = _digest(torch, out)
                # reduce_scatter_tensor and all_reduce (sum).
                ref_sum = torch.stack([x.double() for x in xs]).sum(0)
                rs = torch.empty(shard, dtype=mine.dtype, device=dev)
                dist.reduce_scatter_tensor(rs, mine.clone())
                ar = mine.clone()
                dist.all_reduce(ar)
                for name, got, want in (
                    ("reduce_scatter", rs, ref_sum[rank * shard : (rank + 1) * shard]),
                    ("all_reduce", ar, ref_sum),
                ):
                    if kind == "int":
                        ok = torch.equal(got, want.to(got.dtype))
                        digests[f"{name}/{tag}"] = _digest(torch, got)
                    else:
                        # Different reduction orders differ by rounding: relative L2 error bound per dtype.
                        tol = 2e-2 if kind == "bf16" else 1e-5
                        err = (got.double() - want).norm() / want.norm().clamp_min(1e-30)
                        ok = bool(err <= tol)
                        norms[f"{name}/{tag}"] = float(got.double().norm())
                    if not ok:
                        failures.append(f"{name} {tag}")
        torch.cuda.synchronize()
    result = {
        "rank": rank,
        "world": world,
        "iters": args.iters,
        "failures": failures,
        "digests": digests,
        "norms": norms,
    }
    gathered: list[object] = [None] * world
    dist.all_gather_object(gathered, result)
    if rank == 0:
        with open(args.out, "w") as f:
            json.dump({"ranks": gathered}, f)
        total = sum(len(r["failures"]) for r in gathered)  # type: ignore[index]
        print(
            f"equivalence: {world} ranks, {args.iters} iterations, {len(digests)} outputs per rank, "
            f"{total} failures",
            flush=True,
        )
    dist.destroy_process_group()
    return 1 if failures else 0


def compare(a_path: str, b_path: str) -> int:
    with open(a_path) as f:
        a = json.load(f)["ranks"]
    with open(b_path) as f:
        b = json.load(f)["ranks"]
    bad = 0
    checked = 0
    for ra, rb in zip(a, b, strict=True):
        for k, v in ra["digests"].items():
            checked += 1
            if rb["digests"].get(k) != v:
                bad += 1
                print(f"rank {ra['rank']}: {k} differs (exact)")
        for k, v in ra["norms"].items():
            checked += 1
            w = rb["norms"].get(k)
            if w is None or abs(w - v) > (2e-2 if k.split("/")[1] == "bf16" else 1e-5) * max(abs(v), 1e-30):
                bad += 1
                print(f"rank {ra['rank']}: {k} norm {v} vs {w}")
    fails = sum(len(r["failures"]) for r in a + b)
    print(f"compare: {checked} outputs, {bad} differ; in-run reference failures: {fails}")
    return 1 if bad or fails else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--out", default="equivalence.json")
    ap.add_argument("--compare", nargs=2, metavar=("PLAIN", "TUNED"))
    args = ap.parse_args()
    if args.compare:
        return compare(*args.compare)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
