"""Correctness matrix of the executor: every collective x dtype x reduction x (ragged) size, run from plans
and compared with a reference computed from every rank's (regenerated, deterministic) input. Gathers and
broadcasts must be bit-identical; reductions exact on small-integer data (every dtype) and within the
dtype's usual tolerance on random floating data. Used by the tests and by `autoccl adaptive check`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist

from autoccl.adaptive import collectives as C
from autoccl.adaptive.plan import Plan
from autoccl.adaptive.reduce_ops import ReductionError, resolve
from autoccl.adaptive.transport import Transport

DTYPES: tuple[torch.dtype, ...] = tuple(
    getattr(torch, n)
    for n in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "complex64",
        "complex128",
        "float8_e4m3fn",
        "float8_e5m2",
    )
    if hasattr(torch, n)
)
OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor", "premul_sum")
_FLOAT8 = {d for d in DTYPES if "float8" in str(d)}
_UNSIGNED_WIDE = {d for d in DTYPES if str(d) in ("torch.uint16", "torch.uint32", "torch.uint64")}


def dtype_by_name(name: str) -> torch.dtype:
    aliases = {"fp32": "float32", "fp16": "float16", "bf16": "bfloat16", "fp64": "float64"}
    d = getattr(torch, aliases.get(name, name), None)
    if not isinstance(d, torch.dtype):
        names = ", ".join(str(x).removeprefix("torch.") for x in DTYPES)
        raise ValueError(f"unknown dtype {name!r}; expected one of {names}")
    return d


def make_input(dtype: torch.dtype, n: int, rank: int, salt: int, exact: bool) -> torch.Tensor:
    """Deterministic input of `rank`: small integers (exact reductions on every dtype) or random floats."""
    g = torch.Generator().manual_seed(1_000_003 * salt + 7919 * rank + n)
    if dtype is torch.bool:
        return torch.randint(0, 2, (n,), generator=g).bool()
    if dtype in _FLOAT8 or exact or not (dtype.is_floating_point or dtype.is_complex):
        lo, hi = (
            (0, 3)
            if not dtype.is_signed and not dtype.is_floating_point and not dtype.is_complex
            else (-1, 2)
        )
        if dtype in _FLOAT8:
            return torch.randint(lo, hi, (n,), generator=g).float().to(dtype)
        if dtype.is_complex:
            v = torch.randint(lo, hi, (n, 2), generator=g).double()
            return torch.complex(v[:, 0], v[:, 1]).to(dtype)
        if dtype in _UNSIGNED_WIDE:
            return torch.randint(lo, hi, (n,), generator=g).to(dtype)
        return torch.randint(lo, hi, (n,), generator=g).to(dtype)
    if dtype.is_complex:
        return torch.randn(n, generator=g, dtype=torch.complex128).to(dtype)
    return torch.randn(n, generator=g, dtype=torch.float64).to(dtype)


def _wide(t: torch.Tensor) -> torch.Tensor:
    """A copy in a type whose arithmetic matches the executor's (modular integers, float64, complex128)."""
    if t.dtype is torch.bool:
        return t.clone()
    if t.dtype in _UNSIGNED_WIDE:
        signed = {"torch.uint16": torch.int16, "torch.uint32": torch.int32, "torch.uint64": torch.int64}
        return t.view(signed[str(t.dtype)]).to(torch.int64)
    if t.dtype.is_complex:
        return t.to(torch.complex128)
    if t.dtype.is_floating_point or t.dtype in _FLOAT8:
        return t.to(torch.float64)
    return t.to(torch.int64)


def _narrow(wide: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    if dtype in _UNSIGNED_WIDE:
        signed = {"torch.uint16": torch.int16, "torch.uint32": torch.int32, "torch.uint64": torch.int64}
        return wide.to(signed[str(dtype)]).view(dtype)
    return wide.to(dtype)


def reference_reduce(inputs: Sequence[torch.Tensor], op: str, factor: float = 0.5) -> torch.Tensor:
    """The reduction of every rank's input, in a wide type, then narrowed to the inputs' dtype."""
    dtype = inputs[0].dtype
    xs = [_wide(x) for x in inputs]
    n = len(xs)
    if dtype is torch.bool:
        if op in ("sum", "bor", "max"):
            acc = torch.stack(xs).any(0)
        elif op in ("product", "band", "min"):
            acc = torch.stack(xs).all(0)
        else:
            acc = torch.stack(xs).to(torch.int64).sum(0).remainder(2).bool()
        return acc
    acc = xs[0].clone()
    if op == "premul_sum":
        acc = acc * factor
    for x in xs[1:]:
        if op in ("sum", "avg"):
            acc = acc + x
        elif op == "premul_sum":
            acc = acc + x * factor
        elif op == "product":
            acc = acc * x
        elif op == "min":
            acc = torch.minimum(acc, x)
        elif op == "max":
            acc = torch.maximum(acc, x)
        elif op == "band":
            acc = acc & x
        elif op == "bor":
            acc = acc | x
        elif op == "bxor":
            acc = acc ^ x
    if op == "avg":
        if acc.is_floating_point() or acc.is_complex():
            acc = acc / n
        else:  # the sum wraps in the dtype, then a truncating division (inputs here are small and positive
            # for unsigned types, so the signed view used for them is the value itself)
            acc = torch.div(_wide(_narrow(acc, dtype)), n, rounding_mode="trunc")
    return _narrow(acc, dtype)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """(rtol, atol) for reductions of random floating data (the usual torch.testing values)."""
    return {
        torch.float16: (1e-3, 1e-2),
        torch.bfloat16: (1.6e-2, 5e-2),
        torch.float32: (1.3e-6, 1e-5),
        torch.float64: (1e-7, 1e-7),
        torch.complex64: (1.3e-6, 1e-5),
        torch.complex128: (1e-7, 1e-7),
    }.get(dtype, (0.0, 0.0))


def same(got: torch.Tensor, want: torch.Tensor, exact: bool, bitwise: bool = False) -> bool:
    """bitwise: the same bytes (gathers); exact: the same values (+0 and -0 are equal: the order of a
    reduction decides the sign of a zero); else within the dtype's tolerance."""
    got, want = got.cpu(), want.cpu()
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if bitwise:
        return bool(torch.equal(got.contiguous().view(torch.uint8), want.contiguous().view(torch.uint8)))
    if exact or got.dtype in _FLOAT8 or not (got.dtype.is_floating_point or got.dtype.is_complex):
        return bool(torch.equal(_wide(got), _wide(want)))
    rtol, atol = tolerance(got.dtype)
    return bool(torch.allclose(_wide(got), _wide(want), rtol=rtol, atol=atol))


def valid_ops(dtype: torch.dtype) -> list[str]:
    out = []
    for op in OPS:
        try:
            resolve(_torch_op(op), dtype)
        except ReductionError:
            continue
        out.append(op)
    return out


def _torch_op(op: str) -> Any:
    if op == "premul_sum":
        return dist._make_nccl_premul_sum(0.5)
    return getattr(dist.ReduceOp, op.upper())


@dataclass
class Report:
    cases: int = 0
    failures: list[str] = field(default_factory=list)


def run_matrix(
    plans: dict[str, Plan],
    rank: int,
    world: int,
    dtypes: Sequence[torch.dtype] = DTYPES,
    sizes: Sequence[int] = (5, 37),
    ops: Sequence[str] | None = ("sum",),
    both_kinds: bool = False,
    cycle_sizes: bool = False,
    device: str = "cpu",
    transport: Transport | None = None,
    group: Any = None,
    salt: int = 1,
) -> Report:
    """Run every plan in `plans` (keyed by collective) on every dtype x size x op (ops=None: all valid
    ones); collect mismatches. Floating data is random (tolerance) for fp32/fp64/complex and small integers
    (exact) otherwise; both_kinds runs both on every floating dtype. cycle_sizes gives each dtype one size,
    in turn (a quicker matrix)."""
    rep = Report()

    def note(ok: bool, what: str) -> None:
        rep.cases += 1
        if not ok:
            rep.failures.append(f"rank {rank}: {what}")

    def inputs(dtype: torch.dtype, n: int, k: int, exact: bool) -> list[torch.Tensor]:
        return [make_input(dtype, n, r, salt * 31 + k, exact) for r in range(world)]

    for i, dtype in enumerate(dtypes):
        dops = [o for o in valid_ops(dtype) if ops is None or o in ops]
        for n in [sizes[i % len(sizes)]] if cycle_sizes else sizes:
            tag = f"{dtype} n={n}"
            if "allgather" in plans:
                p = plans["allgather"]
                xs = inputs(dtype, n, 1, True)
                out = torch.empty(n * world, dtype=dtype, device=device)
                C.all_gather_into_tensor(
                    out, xs[rank].clone().to(device), p, group=group, transport=transport
                )
                note(same(out, torch.cat(xs), True, True), f"all_gather_into_tensor {tag}")
                sizes_r = [n + r for r in range(world)]  # ragged: every rank a different size
                ys = [make_input(dtype, sizes_r[r], r, salt * 31 + 2, True) for r in range(world)]
                outs = [torch.empty(k, dtype=dtype, device=device) for k in sizes_r]
                C.all_gather(outs, ys[rank].clone().to(device), p, group=group, transport=transport)
                note(
                    all(same(o, y, True, True) for o, y in zip(outs, ys, strict=True)),
                    f"all_gather(list) {tag}",
                )
            if "broadcast" in plans:
                p = plans["broadcast"]
                xs = inputs(dtype, n, 3, True)
                t = xs[rank].clone().to(device)
                C.broadcast(t, p, group=group, transport=transport)
                note(same(t, xs[p.root], True, True), f"broadcast {tag}")
            for op in dops:
                wide_float = dtype in (torch.float32, torch.float64) or dtype.is_complex
                kinds = (True, False) if both_kinds and (dtype.is_floating_point or dtype.is_complex) else ()
                for exact in kinds or ((False,) if wide_float else (True,)):
                    if dtype in _FLOAT8 and not exact:
                        continue
                    kind = "exact" if exact else "random"
                    what = f"{tag} {op} {kind}"
                    if "allreduce" in plans:
                        xs = inputs(dtype, n, 4, exact)
                        t = xs[rank].clone().to(device)
                        C.all_reduce(t, plans["allreduce"], _torch_op(op), group=group, transport=transport)
                        note(same(t, reference_reduce(xs, op), exact), f"all_reduce {what}")
                    if "reducescatter" in plans:
                        p = plans["reducescatter"]
                        xs = inputs(dtype, n * world, 5, exact)
                        out = torch.empty(n, dtype=dtype, device=device)
                        C.reduce_scatter_tensor(
                            out, xs[rank].clone().to(device), p, _torch_op(op), group, transport
                        )
                        want = reference_reduce(xs, op)[rank * n : (rank + 1) * n]
                        note(same(out, want, exact), f"reduce_scatter_tensor {what}")
                        sizes_r = [n + r for r in range(world)]
                        ins = [
                            [make_input(dtype, sizes_r[k], r, salt * 97 + k, exact) for k in range(world)]
                            for r in range(world)
                        ]
                        out2 = torch.empty(sizes_r[rank], dtype=dtype, device=device)
                        C.reduce_scatter(
                            out2,
                            [x.clone().to(device) for x in ins[rank]],
                            p,
                            _torch_op(op),
                            group,
                            transport,
                        )
                        want2 = reference_reduce([ins[r][rank] for r in range(world)], op)
                        note(same(out2, want2, exact), f"reduce_scatter(list) {what}")
                    if "reduce" in plans:
                        p = plans["reduce"]
                        xs = inputs(dtype, n, 6, exact)
                        t = xs[rank].clone().to(device)
                        C.reduce(t, p, op=_torch_op(op), group=group, transport=transport)
                        want = reference_reduce(xs, op) if rank == p.root else xs[rank]
                        note(same(t, want, exact, bitwise=rank != p.root), f"reduce {what}")
    return rep
