"""Strict JSON for the files autoccl writes. NaN and ±infinity are no JSON: Python's json writes them as the
bare words NaN and Infinity, which jq, JSON.parse and schema validators refuse. A number that is not finite
is written as null instead (a writer that can say why a value is missing says so in a field of its own).
Readers keep reading older files that hold NaN: Python's json.loads accepts it."""

from __future__ import annotations

import json
import math
from typing import Any


def finite_number(value: Any) -> bool:
    """A number a strict file holds as one: not NaN or an infinity (in memory), not null (read back)."""
    return isinstance(value, (int, float)) and math.isfinite(value)


def finite(value: Any) -> Any:
    """VALUE with every float that is not finite replaced by None, through dicts, lists and tuples (a tuple
    becomes a list, as json writes it); other values are returned as they are."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """json.dumps of VALUE with NaN and infinities as null; anything else that json cannot write strictly
    (such a number returned by `default`) is an error rather than a file other tools refuse."""
    return json.dumps(finite(value), allow_nan=False, **kwargs)
