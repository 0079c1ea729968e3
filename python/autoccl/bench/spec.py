"""Pure (torch-free) definitions of the collective benchmark: sizes, collectives, dtypes, loads, formulas.

Size convention (the one nccl-tests uses, see its doc/PERFORMANCE.md): the *size* of a cell is the byte
size of the largest buffer one rank holds for the operation:

| collective      | size S is ...                            | per-rank input | per-rank output |
| --------------- | ---------------------------------------- | -------------- | --------------- |
| all_gather      | the gathered output                      | S / n          | S               |
| reduce_scatter  | the input that is reduced and scattered  | S              | S / n           |
| all_reduce      | the buffer (in place)                    | S              | S               |
| broadcast       | the buffer (root 0)                      | S              | S               |
| reduce          | the buffer (root 0)                      | S              | S (root)        |
| all_to_all      | the send buffer (= the receive buffer)   | S              | S               |

algbw = S / t and busbw = algbw * factor(n) with the factors of nccl-tests; GB/s are 1e9 bytes per second.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from autoccl import collectives

KIB = 1024
_UNITS = {"": 1, "B": 1, "K": KIB, "M": KIB**2, "G": KIB**3, "T": KIB**4}

COLLECTIVES = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce", "all_to_all")
_ALIASES = {
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "ag": "all_gather",
    "reduce_scatter": "reduce_scatter",
    "reducescatter": "reduce_scatter",
    "rs": "reduce_scatter",
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "ar": "all_reduce",
    "broadcast": "broadcast",
    "bcast": "broadcast",
    "reduce": "reduce",
    "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
    "a2a": "all_to_all",
}
# Name of the collective in the plugin's fixed-rule grammar (docs/architecture.md); all_to_all is
# point-to-point inside NCCL and is not tuned by the plugin.
PLUGIN_COLL = {
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "all_reduce": "allreduce",
    "broadcast": "broadcast",
    "reduce": "reduce",
}
SHORT = {
    "all_gather": "AG",
    "reduce_scatter": "RS",
    "all_reduce": "AR",
    "broadcast": "BC",
    "reduce": "RD",
    "all_to_all": "A2A",
}
# Collectives whose per-rank buffers are S/n pieces (S must be divisible by n * element size).
SPLIT_COLLS = ("all_gather", "reduce_scatter", "all_to_all")
REDUCING = ("all_reduce", "reduce_scatter", "reduce")

DTYPES = {
    "bf16": ("bfloat16", 2),
    "fp16": ("float16", 2),
    "fp32": ("float32", 4),
    "fp64": ("float64", 8),
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "int32": ("int32", 4),
    "int64": ("int64", 8),
}
_DTYPE_ALIASES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
    "float64": "fp64",
    "double": "fp64",
}


class SpecError(ValueError):
    """A bad benchmark argument (reported to the user as is)."""


def parse_size(text: str) -> int:
    """`64`, `4K`, `1M`, `1G`, `2MiB`, `1MB` -> bytes (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", text.upper())
    if not m:
        raise SpecError(f"bad size {text!r}: expected an integer with an optional K/M/G/T suffix (binary)")
    value = int(m.group(1)) * _UNITS[m.group(2)]
    if value <= 0:
        raise SpecError(f"bad size {text!r}: must be positive")
    return value


def format_size(nbytes: int) -> str:
    """Bytes -> the shortest exact binary-unit spelling (`1048576` -> `1M`, `1536` -> `1536`)."""
    for unit in ("T", "G", "M", "K"):
        if nbytes % _UNITS[unit] == 0 and nbytes >= _UNITS[unit]:
            return f"{nbytes // _UNITS[unit]}{unit}"
    return str(nbytes)


# More sizes than any measurement needs: beyond it a list is a slip (1M:1G:+1 is a billion sizes, which
# filled 8 GB of memory before any check), refused before it is built.
MAX_SIZES = 1000


def parse_sizes(text: str) -> list[int]:
    """Comma-separated sizes and ranges. A range is `start:end[:step]` with step `xF` (geometric,
    default `x2`) or `+S` (arithmetic); the end is included when the steps reach it exactly. At most
    MAX_SIZES sizes, counted before any list is built."""
    out: list[int] = []

    def too_many(count: str) -> SpecError:
        return SpecError(f"--sizes {text!r} gives {count} sizes, more than {MAX_SIZES}: take a coarser step")

    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        parts = item.split(":")
        if len(parts) == 1:
            out.append(parse_size(parts[0]))
            if len(out) > MAX_SIZES:
                raise too_many(f"more than {MAX_SIZES}")
            continue
        if len(parts) not in (2, 3):
            raise SpecError(f"bad size range {item!r}: expected start:end[:xF|+S]")
        lo, hi = parse_size(parts[0]), parse_size(parts[1])
        if hi < lo:
            raise SpecError(f"bad size range {item!r}: end is smaller than start")
        step = parts[2].strip().lower() if len(parts) == 3 else "x2"
        cur = lo
        if step.startswith("x"):
            try:
                factor = float(step[1:])
            except ValueError:
                raise SpecError(f"bad step {step!r} in {item!r}: expected xF (e.g. x2)") from None
            if not 1 < factor < math.inf:
                raise SpecError(f"bad step {step!r} in {item!r}: factor must be > 1 and finite")
            while cur <= hi:
                out.append(cur)
                if len(out) > MAX_SIZES:  # a factor near 1 steps by a byte: stop counting past the cap
                    raise too_many(f"more than {MAX_SIZES}")
                cur = max(cur + 1, round(cur * factor))
        elif step.startswith("+"):
            inc = parse_size(step[1:])
            count = len(out) + (hi - lo) // inc + 1
            if count > MAX_SIZES:
                raise too_many(f"{count:,}")
            while cur <= hi:
                out.append(cur)
                cur += inc
        else:
            raise SpecError(f"bad step {step!r} in {item!r}: expected xF or +S")
    if not out:
        raise SpecError("no sizes given")
    return sorted(set(out))


def parse_collectives(text: str) -> list[str]:
    out: list[str] = []
    for item in (s.strip().lower() for s in text.split(",")):
        if not item:
            continue
        if item == "all":
            out.extend(c for c in COLLECTIVES if c not in out)
            continue
        if item not in _ALIASES:
            raise SpecError(f"unknown collective {item!r}; expected one of {', '.join(COLLECTIVES)} (or all)")
        if _ALIASES[item] not in out:
            out.append(_ALIASES[item])
    if not out:
        raise SpecError("no collectives given")
    return out


def parse_dtype(text: str) -> str:
    key = _DTYPE_ALIASES.get(text.strip().lower(), text.strip().lower())
    if key not in DTYPES:
        raise SpecError(f"unknown dtype {text!r}; expected one of {', '.join(DTYPES)}")
    return key


def dtype_size(dtype: str) -> int:
    return DTYPES[dtype][1]


def bus_factor(coll: str, n: int) -> float:
    """busbw / algbw (autoccl.collectives.bus_factor), a SpecError for a bad cell."""
    try:
        return collectives.bus_factor(coll, n)
    except ValueError as e:
        raise SpecError(str(e)) from None


def algbw_gbs(nbytes: int, seconds: float) -> float:
    return nbytes / seconds / 1e9 if seconds > 0 else math.nan


def busbw_gbs(coll: str, nbytes: int, seconds: float, n: int) -> float:
    return algbw_gbs(nbytes, seconds) * bus_factor(coll, n)


def buffer_elements(coll: str, nbytes: int, dtype: str, n: int) -> tuple[int, int]:
    """(input elements, output elements) per rank for a cell of size `nbytes` (see the module doc)."""
    count = nbytes // dtype_size(dtype)
    if coll == "all_gather":
        return count // n, count
    if coll == "reduce_scatter":
        return count, count // n
    return count, count


def validate_cells(colls: list[str], sizes: list[int], dtype: str, n: int) -> None:
    """Every size must be a whole number of elements, and the split collectives need S divisible by
    n * element size (nccl-tests rounds down instead; we refuse so that sizes mean what they say)."""
    es = dtype_size(dtype)
    for s in sizes:
        if s % es:
            raise SpecError(f"size {format_size(s)} is not a multiple of the {dtype} element size ({es} B)")
    split = [c for c in colls if c in SPLIT_COLLS]
    if split:
        bad = [format_size(s) for s in sizes if s % (n * es)]
        if bad:
            raise SpecError(
                f"sizes {', '.join(bad)} are not divisible by world size {n} x {es} B "
                f"(needed by {', '.join(split)}); choose sizes that are multiples of {n * es} B"
            )


@dataclass(frozen=True)
class Load:
    """Compute load run beside the collective: C = sigmoid(A @ B), A is M x K, B is K x N."""

    name: str  # none | light | heavy | gemm:MxKxN[:dtype]
    m: int = 0
    k: int = 0
    n: int = 0
    dtype: str = "bf16"

    @property
    def active(self) -> bool:
        return self.name != "none"

    @property
    def flops(self) -> int:
        return 2 * self.m * self.k * self.n

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "m": self.m, "k": self.k, "n": self.n, "dtype": self.dtype}


PRESET_LOADS = {
    "none": Load("none"),
    # The AutoCCL paper's GEMM: 3456x128 @ 128x3456, fp16, then sigmoid.
    "light": Load("light", 3456, 128, 3456, "fp16"),
    "heavy": Load("heavy", 8192, 8192, 8192, "bf16"),
}


def parse_load(text: str) -> Load:
    t = text.strip().lower()
    if t in PRESET_LOADS:
        return PRESET_LOADS[t]
    m = re.fullmatch(r"gemm:(\d+)x(\d+)x(\d+)(?::(\w+))?", t)
    if not m:
        raise SpecError(f"bad load {text!r}: expected none, light, heavy or gemm:MxKxN[:dtype]")
    dims = [int(g) for g in m.groups()[:3]]
    if min(dims) <= 0:
        raise SpecError(f"bad load {text!r}: dimensions must be positive")
    dtype = parse_dtype(m.group(4) or "bf16")
    if dtype not in ("bf16", "fp16", "fp32", "fp64"):
        raise SpecError(f"bad load {text!r}: GEMM dtype must be a floating type")
    return Load(t, dims[0], dims[1], dims[2], dtype)


def parse_loads(text: str) -> list[Load]:
    # `gemm:...:dtype` contains ':' but never ','; split on commas.
    out: list[Load] = []
    for item in (s for s in text.split(",") if s.strip()):
        load = parse_load(item)
        if load not in out:
            out.append(load)
    if not out:
        raise SpecError("no loads given")
    return out


def load_from_json(d: dict[str, object]) -> Load:
    return Load(str(d["name"]), int(d["m"]), int(d["k"]), int(d["n"]), str(d["dtype"]))  # type: ignore[call-overload]


def cell_key(coll: str, nbytes: int, load: str) -> str:
    return f"{coll}/{nbytes}/{load}"
