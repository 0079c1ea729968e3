"""Reductions applied by the executor when a reducing transfer lands: every `torch.distributed.ReduceOp`
(SUM, AVG, PRODUCT, MIN, MAX, BAND, BOR, BXOR, PREMUL_SUM) on every dtype where the operation means
something, with NCCL's conventions:

* bool: SUM is a logical or, PRODUCT a logical and (NCCL reduces bool as uint8 with max/min);
* AVG: a sum divided by the number of ranks at the end (integers: truncating division);
* PREMUL_SUM: each rank's contribution scaled by the op's factor, then summed (floating/complex only);
* unsigned 16/32/64-bit integers, which torch cannot add on the CPU, are reduced through their signed
  twins (sums and products wrap identically; MIN/MAX flip the sign bit to keep the unsigned order);
* float8: reduced through float32, rounded back after every step, as a float8 kernel would.

Invalid pairs (MIN on complex, bitwise on floating types, AVG on bool...) are one clear error.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

_FLOAT8 = tuple(
    getattr(torch, n)
    for n in ("float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if hasattr(torch, n)
)
_UNSIGNED = {
    getattr(torch, u): (getattr(torch, s), bits)
    for u, s, bits in (("uint16", "int16", 16), ("uint32", "int32", 32), ("uint64", "int64", 64))
    if hasattr(torch, u)
}
_NAMES = {
    "sum": "sum",
    "avg": "avg",
    "mean": "avg",
    "product": "product",
    "prod": "product",
    "min": "min",
    "max": "max",
    "band": "band",
    "bor": "bor",
    "bxor": "bxor",
    "premul_sum": "premul_sum",
}


class ReductionError(ValueError):
    """A reduction that is not defined for the tensor's dtype."""


@dataclass(frozen=True)
class Reduction:
    name: str  # sum, avg, product, min, max, band, bor, bxor, premul_sum
    dtype: torch.dtype
    factor: float | complex | None = None  # PREMUL_SUM

    def combine(self, acc: torch.Tensor, incoming: torch.Tensor) -> None:
        """acc <- acc (op) incoming, in place."""
        _combine(self.name, acc, incoming)

    def prepare(self, contribution: torch.Tensor) -> None:
        """Scale this rank's own contribution before the reduction starts (PREMUL_SUM)."""
        if self.name == "premul_sum" and self.factor is not None:
            if self.dtype in _FLOAT8:
                contribution.copy_((contribution.float() * complex(self.factor).real).to(self.dtype))
            else:
                contribution.mul_(self.factor)

    def finish(self, result: torch.Tensor, nranks: int) -> None:
        """Turn the reduced value into the op's result (AVG divides by the number of ranks)."""
        if self.name != "avg":
            return
        if self.dtype in _FLOAT8:
            result.copy_((result.float() / nranks).to(self.dtype))
        elif result.is_floating_point() or result.is_complex():
            result.div_(nranks)
        elif self.dtype in _UNSIGNED:
            signed, bits = _UNSIGNED[self.dtype]
            wide = result.view(signed).to(torch.int64) & ((1 << bits) - 1)
            result.view(signed).copy_(torch.div(wide, nranks, rounding_mode="trunc").to(signed))
        else:
            result.div_(nranks, rounding_mode="trunc")


def _op_name(op: Any) -> tuple[str, Any]:
    """(name, factor) of a torch ReduceOp, a RedOpType, or a name string."""
    if isinstance(op, str):
        key = op.strip().lower()
        if key not in _NAMES:
            raise ReductionError(
                f"unknown reduction {op!r}; expected one of {', '.join(sorted(set(_NAMES.values())))}"
            )
        return _NAMES[key], None
    # a ReduceOp object (e.g. from _make_nccl_premul_sum) carries .op and .factor; RedOpType members not
    factor = getattr(op, "factor", None) if type(op) is dist.ReduceOp else None
    kind = getattr(op, "op", op) if type(op) is dist.ReduceOp else op
    name = getattr(kind, "name", None)
    if not isinstance(name, str) or name.lower() not in _NAMES:
        raise ReductionError(f"unsupported reduction {op!r}")
    return _NAMES[name.lower()], factor


def resolve(op: Any, dtype: torch.dtype) -> Reduction:
    """Validate (op, dtype) and return the Reduction; one clear error when the pair is undefined."""
    name, factor = _op_name(op)
    is_float = dtype.is_floating_point or dtype in _FLOAT8
    is_complex = dtype.is_complex
    if name in ("band", "bor", "bxor") and (is_float or is_complex):
        raise ReductionError(f"{name.upper()} is a bitwise reduction: not defined for {dtype}")
    if name in ("min", "max") and is_complex:
        raise ReductionError(f"{name.upper()} is not defined for complex dtype {dtype}")
    if name == "avg" and dtype is torch.bool:
        raise ReductionError("AVG is not defined for bool tensors")
    if name == "avg" and dtype is getattr(torch, "uint64", None):
        raise ReductionError("AVG is not supported for uint64 (its sums do not fit a wider integer type)")
    if name == "premul_sum":
        if not (is_float or is_complex):
            raise ReductionError(f"PREMUL_SUM needs a floating or complex dtype, got {dtype}")
        if factor is None:
            raise ReductionError("PREMUL_SUM needs a factor (torch.distributed._make_nccl_premul_sum(f))")
        if isinstance(factor, torch.Tensor):
            factor = factor.item()
    return Reduction(name, dtype, factor)


def _elementwise(name: str) -> Callable[[torch.Tensor, torch.Tensor], None]:
    def run(a: torch.Tensor, b: torch.Tensor) -> None:
        if name in ("sum", "avg", "premul_sum"):
            a.add_(b)
        elif name == "product":
            a.mul_(b)
        elif name == "min":
            torch.minimum(a, b, out=a)
        elif name == "max":
            torch.maximum(a, b, out=a)
        elif name == "band":
            a.bitwise_and_(b)
        elif name == "bor":
            a.bitwise_or_(b)
        else:
            a.bitwise_xor_(b)

    return run


def _combine(name: str, acc: torch.Tensor, incoming: torch.Tensor) -> None:
    dtype = acc.dtype
    if dtype is torch.bool:
        if name in ("sum", "bor", "max"):
            acc.logical_or_(incoming)
        elif name in ("product", "band", "min"):
            acc.logical_and_(incoming)
        else:  # bxor
            acc.logical_xor_(incoming)
        return
    if dtype in _FLOAT8:
        wide = acc.float()
        _elementwise(name)(wide, incoming.float())
        acc.copy_(wide.to(dtype))
        return
    if dtype in _UNSIGNED:
        signed, bits = _UNSIGNED[dtype]
        a, b = acc.view(signed), incoming.view(signed)
        if name in ("min", "max"):
            flip = torch.tensor(-(1 << (bits - 1)), dtype=signed, device=acc.device)
            fa = a.bitwise_xor(flip)
            _elementwise(name)(fa, b.bitwise_xor(flip))
            a.copy_(fa.bitwise_xor_(flip))
        else:
            _elementwise(name)(a, b)
        return
    _elementwise(name)(acc, incoming)
