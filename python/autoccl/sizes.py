"""Sizes in bytes as people write them ('1G', '64M', '4096'): shared by the tuner's and the synthesizer's
command lines, so that neither imports the other to read one."""

from __future__ import annotations

import math

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int | float) -> float:
    """'1G' -> 2**30 bytes (binary units, as everywhere in autoccl); plain numbers are bytes.

    Text must give a positive, finite size, else ValueError names it; a number is taken as it is (the library
    checks its range) unless it is NaN or infinite."""
    if isinstance(text, int | float):
        if not math.isfinite(text):
            raise ValueError(f"size must be a finite number of bytes, got {text!r}")
        return float(text)
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = s[-1:] if s[-1:] in _UNITS and s[-1:] else ""
    num = s[: len(s) - len(unit)] if unit else s
    try:
        value = float(num) * _UNITS[unit]
    except ValueError as e:
        raise ValueError(f"bad size {text!r} (e.g. 1G, 64M, 4096)") from e
    if not math.isfinite(value):  # nan, inf, 1e400M: float() takes them
        raise ValueError(f"bad size {text!r}: not a finite number of bytes (e.g. 1G, 64M, 4096)")
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value
