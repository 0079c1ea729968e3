"""Topology-aware collective synthesis (TACOS done completely).

Python front-end of the C++ library ``autoccl_synth`` (module ``autoccl._synth``). See docs/synth.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

from autoccl.synth.topofile import TopologyFileError, parse_gen_spec, topology_from_dict

__all__ = [
    "BASELINES",
    "COLLECTIVES",
    "TopologyFileError",
    "baseline",
    "check",
    "ext",
    "generate",
    "load_schedule",
    "load_topology",
    "lower_bound",
    "parse_gen_spec",
    "parse_size",
    "save_schedule",
    "simulate",
    "synthesize",
    "to_msccl_xml",
    "to_mscclpp_json",
    "topology_from_dict",
]

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
BASELINES = ("ring", "direct", "rhd", "dbtree", "hierarchical")

_EXT: ModuleType | None = None


def _candidates() -> list[Path]:
    found: list[Path] = []
    for var in ("AUTOCCL_SYNTH_LIB_DIR", "AUTOCCL_LIB_DIR"):
        d = os.environ.get(var)
        if d:
            found.extend(sorted(Path(d).glob("_synth*.so")))
    repo = Path(__file__).resolve().parents[3]
    found.extend(sorted(repo.glob("build/*/lib/_synth*.so")))
    return found


def ext() -> ModuleType:
    """The compiled module: `autoccl._synth` from a wheel, else a development build (AUTOCCL_LIB_DIR)."""
    global _EXT
    if _EXT is not None:
        return _EXT
    try:
        from autoccl import _synth  # type: ignore[attr-defined]

        _EXT = _synth
        return _synth
    except ImportError:
        pass
    for path in _candidates():
        spec = importlib.util.spec_from_file_location("autoccl._synth", path)
        if spec is None or spec.loader is None:
            continue
        mod = importlib.util.module_from_spec(spec)
        sys.modules["autoccl._synth"] = mod
        spec.loader.exec_module(mod)
        _EXT = mod
        return mod
    raise ImportError(
        "autoccl._synth not found: install autoccl (`pip install .`) or build it "
        "(cmake --build <dir> --target _synth) and set AUTOCCL_LIB_DIR=<dir>/lib"
    )


_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text: str | int | float) -> float:
    """'1G' -> 2**30 bytes (binary units, as everywhere in autoccl); plain numbers are bytes."""
    if isinstance(text, int | float):
        return float(text)
    s = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = s[-1:] if s[-1:] in _UNITS and s[-1:] else ""
    num = s[: len(s) - len(unit)] if unit else s
    try:
        value = float(num) * _UNITS[unit]
    except ValueError as e:
        raise ValueError(f"bad size {text!r} (e.g. 1G, 64M, 4096)") from e
    if value <= 0:
        raise ValueError(f"size must be positive, got {text!r}")
    return value


def generate(kind: str, dims: list[int], **params: Any) -> Any:
    """Build a generated topology (see docs/synth.md for kinds and parameters)."""
    return ext().generate(kind, list(dims), **params)


def load_topology(path: str | Path) -> Any:
    """Load and validate a topology file (YAML or JSON)."""
    import yaml

    p = Path(path)
    text = p.read_text()
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as e:
        raise TopologyFileError(f"{p}: not valid {'JSON' if p.suffix == '.json' else 'YAML'}: {e}") from e
    return topology_from_dict(data, source=str(p))


def synthesize(
    topology: Any,
    collective: str,
    size: str | float,
    *,
    chunks: int = 1,
    seeds: int = 1,
    threads: int = 0,
    seed: int = 1,
    root: int = 0,
    record: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """Synthesize a schedule. Returns (Schedule, stats). Deterministic for (seed, seeds)."""
    return ext().synthesize(
        topology, collective, parse_size(size), chunks, seeds, threads, seed, root, record
    )


def baseline(
    topology: Any, algorithm: str, collective: str, size: str | float, *, chunks: int = 1, root: int = 0
) -> Any:
    return ext().baseline(topology, algorithm, collective, parse_size(size), chunks, root)


def simulate(topology: Any, schedule: Any) -> dict[str, Any]:
    return dict(ext().simulate(topology, schedule))


def check(schedule: Any, topology: Any | None = None) -> dict[str, Any]:
    return dict(ext().check(schedule, topology))


def lower_bound(topology: Any, collective: str, size: str | float) -> float:
    return float(ext().lower_bound(topology, collective, parse_size(size)))


def to_msccl_xml(schedule: Any, name: str = "autoccl_tacos") -> str:
    return str(ext().to_msccl_xml(schedule, name))


def to_mscclpp_json(schedule: Any, topology: Any, name: str = "autoccl_tacos") -> str:
    return str(ext().to_mscclpp_json(schedule, topology, name))


def save_schedule(schedule: Any, path: str | Path, topology: Any | None = None) -> None:
    Path(path).write_text(schedule.to_json(topology))


def load_schedule(path: str | Path) -> Any:
    """Read a schedule JSON file (format `autoccl-schedule` v1, docs/synth.md)."""
    data = json.loads(Path(path).read_text())
    if data.get("format") != "autoccl-schedule" or data.get("version") != 1:
        raise ValueError(f"{path}: not an autoccl-schedule v1 file")
    s = ext().Schedule()
    s.collective = data["collective"]
    s.algorithm = str(data.get("algorithm", ""))
    s.nranks = int(data["nranks"])
    s.nchunks = int(data["nchunks"])
    s.chunks_per_rank = int(data.get("chunks_per_rank", 1))
    s.root = int(data.get("root", 0))
    s.chunk_bytes = float(data["chunk_bytes"])
    s.bytes = float(data["bytes"])
    s.time_us = float(data.get("time_us", 0))
    s.seed = int(data.get("seed", 0))
    s.owner = [int(x) for x in data["owner"]]
    s.routes = [[int(x) for x in r] for r in data.get("routes", [])]
    fields = data.get("transfer_fields")
    expected = ["chunk", "src", "dst", "start_us", "end_us", "op", "route", "step"]
    if fields != expected:
        raise ValueError(f"{path}: transfer_fields must be {expected}")
    rows = data["transfers"]
    cols = list(zip(*rows, strict=True)) if rows else [()] * 8
    s.set_transfers(
        [int(x) for x in cols[0]],
        [int(x) for x in cols[1]],
        [int(x) for x in cols[2]],
        [float(x) for x in cols[3]],
        [float(x) for x in cols[4]],
        [int(x) for x in cols[5]],
        [int(x) for x in cols[6]],
        [int(x) for x in cols[7]],
    )
    return s
