"""Topology-aware collective synthesis (TACOS done completely).

Python front-end of the C++ library ``autoccl_synth`` (module ``autoccl._synth``). See docs/synth.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoccl.sizes import parse_size
from autoccl.synth._ext import ext
from autoccl.synth.topofile import TopologyFileError, parse_gen_spec, topology_from_dict

__all__ = [
    "BASELINES",
    "COLLECTIVES",
    "MAX_BYTES",
    "MAX_CHUNKS",
    "ScheduleError",
    "TopologyFileError",
    "baseline",
    "check",
    "default_seeds",
    "ext",
    "generate",
    "load_schedule",
    "load_topology",
    "lower_bound",
    "lower_bounds",
    "parse_gen_spec",
    "parse_size",
    "save_schedule",
    "simulate",
    "synthesize",
    "synthesize_to_stream",
    "to_msccl_xml",
    "to_mscclpp_json",
    "topology_from_dict",
]

COLLECTIVES = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")
BASELINES = ("ring", "direct", "rhd", "dbtree", "hierarchical")

# The library's limits, stated here too because the command line checks its options before it loads the
# extension; tests/synth/test_synth.py holds each equal to the extension's own (its MAX_COLLECTIVE_BYTES and
# MAX_CHUNKS).
# The largest collective size synthesis and the baselines take (the C++ library's kMaxCollectiveBytes):
# 2^50 bytes, 1 PiB. Times are microseconds in double precision; a collective far larger lasts so long that
# its times cannot resolve link latencies any more.
MAX_BYTES = float(1 << 50)
# The most chunks one schedule holds: NPUs x chunks per NPU (per root for Broadcast/Reduce).
MAX_CHUNKS = 2_000_000_000


def generate(kind: str, dims: list[int], **params: Any) -> Any:
    """Build a generated topology (see docs/synth.md for kinds and parameters)."""
    return ext().generate(kind, list(dims), **params)


def load_topology(path: str | Path) -> Any:
    """Load and validate a topology file (YAML or JSON)."""
    import yaml

    p = Path(path)
    try:
        text = p.read_text()
    except UnicodeDecodeError as e:  # its message does not say which file
        raise TopologyFileError(
            f"{p}: not a topology file (not UTF-8 text: {e.reason} at byte {e.start})"
        ) from e
    try:
        data = json.loads(text) if p.suffix == ".json" else yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise TopologyFileError(f"{p}: not valid JSON: {e}") from e
    except yaml.YAMLError as e:
        raise TopologyFileError(f"{p}: not valid YAML: {_yaml_problem(e)}") from e
    if isinstance(data, dict) and "name" not in data and "generator" not in data:
        data = {**data, "name": p.stem}
    return topology_from_dict(data, source=str(p))


def _yaml_problem(e: Exception) -> str:
    """A YAML error in one line: where (line, column of the file) and what, without PyYAML's multi-line
    excerpt of the text or its name for the stream."""
    mark, problem = getattr(e, "problem_mark", None), getattr(e, "problem", None)
    context, context_mark = getattr(e, "context", None), getattr(e, "context_mark", None)
    if mark is None or not problem:
        return str(e).splitlines()[0]
    text = f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    if context:
        text += f" ({context}" + (f" from line {context_mark.line + 1})" if context_mark else ")")
    return text


def synthesize(
    topology: Any,
    collective: str,
    size: str | float,
    *,
    chunks: int = 0,
    seeds: int = 1,
    threads: int = 0,
    seed: int = 1,
    root: int = 0,
    record: bool = True,
    max_memory_gib: float | None = None,
    progress: Callable[[float, int], None] | None = None,
    direct: bool = True,
) -> tuple[Any, dict[str, Any]]:
    """Synthesize a schedule. Returns (Schedule, stats). Deterministic for (seed, seeds).

    chunks: chunks per NPU (per root for Broadcast/Reduce); 0 chooses it by trial (stats["chunk_trials"]).
    max_memory_gib: refuse (ValueError, before any work) what would need more; default: the machine's memory.
    progress: called about every 50 ms with (seconds so far, chunk deliveries made so far: every seed, chunk
    trial and phase); an exception it raises stops the synthesis and is raised here. Ctrl-C stops it too.
    direct: where every NPU pair has a channel (general engine), the direct pattern is a candidate spreading
    schedule beside the seeds (stats["direct_pattern"] when it won); False: the seeds alone.
    """
    limit = physical_memory_gib() if max_memory_gib is None else max_memory_gib
    return ext().synthesize(
        topology,
        collective,
        parse_size(size),
        chunks,
        seeds,
        threads,
        seed,
        root,
        record,
        limit * 2**30,
        progress,
        direct,
    )


def default_seeds(topology: Any) -> int:
    """Seeds worth running by default: 8 (every policy of the engine once) up to 5e6 chunk deliveries per seed
    at one chunk per NPU, 4 up to 5e7, else 1 (a 40,000-NPU All-Gather is 1.6e9 deliveries)."""
    work = topology.num_npus * (topology.num_npus - 1)
    return 8 if work <= 5e6 else 4 if work <= 5e7 else 1


def synthesize_to_stream(
    topology: Any,
    collective: str,
    size: str | float,
    path: str | Path,
    *,
    chunks: int = 0,
    seeds: int = 1,
    threads: int = 0,
    seed: int = 1,
    root: int = 0,
    max_memory_gib: float | None = None,
    progress: Callable[[float, int], None] | None = None,
) -> tuple[Any, dict[str, Any]]:
    """Synthesize and write the schedule to `path` as it is made (format autoccl-schedule-stream v1), keeping
    no transfer list in memory. Returns (the schedule's header, stats with "bytes_written"). The file is
    written as `path`.partial and renamed when complete; a synthesis that fails or is stopped leaves neither.
    progress: as synthesize()'s."""
    limit = physical_memory_gib() if max_memory_gib is None else max_memory_gib
    return ext().synthesize_to_stream(
        topology,
        collective,
        parse_size(size),
        chunks,
        seeds,
        threads,
        seed,
        root,
        str(path),
        limit * 2**30,
        progress,
    )


def physical_memory_gib() -> float:
    """This machine's memory (GiB); 0 where it cannot be read (no limit)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        return 0.0


def baseline(
    topology: Any,
    algorithm: str,
    collective: str,
    size: str | float,
    *,
    chunks: int = 1,
    root: int = 0,
    max_memory_gib: float | None = None,
) -> Any:
    """An untimed baseline schedule. max_memory_gib: refuse (ValueError, before any work) one whose transfer
    list, simulated and checked, would need more; default: the machine's memory; 0: no limit."""
    limit = physical_memory_gib() if max_memory_gib is None else max_memory_gib
    return ext().baseline(topology, algorithm, collective, parse_size(size), chunks, root, limit * 2**30)


def simulate(topology: Any, schedule: Any) -> dict[str, Any]:
    return dict(ext().simulate(topology, schedule))


def check(
    schedule: Any,
    topology: Any | None = None,
    *,
    exact_durations: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Prove a schedule correct (docs/synth.md, Checker). `exact_durations`: every transfer must last exactly
    what the model gives its route; `progress(done, total)` is called now and then on large schedules."""
    return dict(ext().check(schedule, topology, exact_durations, progress))


def lower_bound(topology: Any, collective: str, size: str | float, root: int = 0) -> float:
    """The largest bandwidth lower bound (us): per NPU, and cuts over the topology's natural groups."""
    return float(ext().lower_bound(topology, collective, parse_size(size), root)["time_us"])


def lower_bounds(topology: Any, collective: str, size: str | float, root: int = 0) -> dict[str, Any]:
    """The bound with its origin: time_us, per_npu_us, kind ("per-NPU", "cut", "partition") and what."""
    return dict(ext().lower_bound(topology, collective, parse_size(size), root))


def to_msccl_xml(schedule: Any, name: str = "autoccl_tacos") -> str:
    return str(ext().to_msccl_xml(schedule, name))


def to_mscclpp_json(schedule: Any, topology: Any, name: str = "autoccl_tacos") -> str:
    return str(ext().to_mscclpp_json(schedule, topology, name))


def save_schedule(schedule: Any, path: str | Path, topology: Any | None = None) -> None:
    Path(path).write_text(schedule.to_json(topology))


class ScheduleError(ValueError):
    """A schedule file that cannot be read, or that does not match the topology it is used with."""


_FIELDS_V1 = ["chunk", "src", "dst", "start_us", "end_us", "op", "route", "step"]
_FIELDS_V2 = [*_FIELDS_V1, "order"]


def _need(data: dict[str, Any], key: str, path: str | Path) -> Any:
    if key not in data:
        raise ScheduleError(f"{path}: schedule has no '{key}'")
    return data[key]


def _header(s: Any, data: dict[str, Any], path: str | Path) -> None:
    try:
        s.collective = str(_need(data, "collective", path))
        s.algorithm = str(data.get("algorithm", ""))
        s.nranks = int(_need(data, "nranks", path))
        s.nchunks = int(_need(data, "nchunks", path))
        s.chunks_per_rank = int(data.get("chunks_per_rank", 1))
        s.root = int(data.get("root", 0))
        s.chunk_bytes = float(_need(data, "chunk_bytes", path))
        s.bytes = float(_need(data, "bytes", path))
        s.time_us = float(data.get("time_us", 0))
        s.seed = int(data.get("seed", 0))
        s.owner = [int(x) for x in _need(data, "owner", path)]
        s.routes = [[int(x) for x in r] for r in data.get("routes", [])]
    except ScheduleError:
        raise
    except (TypeError, ValueError) as e:
        raise ScheduleError(f"{path}: bad schedule header: {e}") from e


def _load_json(path: str | Path) -> tuple[Any, dict[str, Any]]:
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ScheduleError(f"{path}: cannot read the schedule: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ScheduleError(f"{path}: not valid JSON: {e}") from e
    if not isinstance(data, dict) or data.get("format") != "autoccl-schedule":
        raise ScheduleError(f"{path}: not an autoccl-schedule file")
    version = data.get("version")
    if version not in (1, 2):
        raise ScheduleError(f"{path}: autoccl-schedule version {version!r} is not supported (1 or 2)")
    fields = data.get("transfer_fields")
    expected = _FIELDS_V1 if version == 1 else _FIELDS_V2
    if fields != expected:
        raise ScheduleError(f"{path}: transfer_fields must be {expected}")
    s = ext().Schedule()
    _header(s, data, path)
    rows = _need(data, "transfers", path)
    import numpy as np

    try:
        table = np.array(rows, dtype=np.float64).reshape(len(rows), len(expected))
    except (TypeError, ValueError) as e:
        raise ScheduleError(f"{path}: every transfer must be a list of {len(expected)} numbers") from e
    ints = [i for i, f in enumerate(expected) if f not in ("start_us", "end_us")]
    if len(rows) and (
        not np.all(np.isfinite(table[:, ints]))
        or not np.all(table[:, ints] == np.round(table[:, ints]))
        or np.any(np.abs(table[:, ints]) >= 2**31)
    ):
        raise ScheduleError(f"{path}: chunk, src, dst, op, route, step and order must be 32-bit integers")
    col = {f: table[:, i] for i, f in enumerate(expected)}
    try:
        s.set_transfers(
            col["chunk"].astype(np.int32),
            col["src"].astype(np.int32),
            col["dst"].astype(np.int32),
            col["start_us"],
            col["end_us"],
            col["op"].astype(np.int32),
            col["route"].astype(np.int32),
            col["step"].astype(np.int32),
            col["order"].astype(np.int32) if version == 2 else None,
        )
    except ValueError as e:
        raise ScheduleError(f"{path}: {e}") from e
    if version == 1 and s.timed:
        s.assign_reduction_order()  # v1 states none: reductions apply in arrival order
    return s, data


def _load_stream(path: str | Path) -> tuple[Any, dict[str, Any]]:
    import struct

    try:
        with open(path, "rb") as f:
            f.read(4)
            (version,) = struct.unpack("<I", f.read(4))
            (length,) = struct.unpack("<Q", f.read(8))
            data = json.loads(f.read(length))
    except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ScheduleError(f"{path}: not a readable autoccl schedule stream: {e}") from e
    if version != 1 or not isinstance(data, dict) or data.get("format") != "autoccl-schedule-stream":
        raise ScheduleError(f"{path}: not an autoccl-schedule-stream v1 file")
    s = ext().Schedule()
    _header(s, {k: v for k, v in data.items() if k != "routes"}, path)
    ranks, links = data.get("ranks"), data.get("links")
    if not isinstance(ranks, list) or not isinstance(links, list):
        raise ScheduleError(f"{path}: the stream's header has no ranks or links")
    rank_of = {str(name): r for r, name in enumerate(ranks)}
    sections: list[Any] = []
    routes: list[list[int]] = []
    route_src: list[int] = []
    route_dst: list[int] = []
    try:
        for sec in _need(data, "sections", path):
            x = ext().StreamSection()
            x.mirror = sec["kind"] == "mirror"
            x.blocks_of = int(sec.get("blocks_of", -1))
            x.routes = [[int(i) for i in r] for r in sec["routes"]]
            x.route_us = [float(v) for v in sec["route_us"]]
            if len(x.routes) != len(x.route_us):
                raise ScheduleError(
                    f"{path}: a section has {len(x.routes)} routes and {len(x.route_us)} durations"
                )
            for r in x.routes:
                if not r or min(r) < 0 or max(r) >= len(links):
                    raise ScheduleError(f"{path}: a route names a link the stream does not list")
                a, b = str(links[r[0]][0]), str(links[r[-1]][1])
                if a not in rank_of or b not in rank_of:
                    raise ScheduleError(f"{path}: a route does not lead from an NPU to an NPU")
                route_src.append(rank_of[a])
                route_dst.append(rank_of[b])
            routes += x.routes
            sections.append(x)
    except ScheduleError:
        raise
    except (KeyError, TypeError, ValueError, IndexError) as e:
        raise ScheduleError(f"{path}: bad stream section: {e}") from e
    s.routes = routes
    try:
        ext().read_schedule_stream(str(path), sections, s, route_src, route_dst)
    except ValueError as e:
        raise ScheduleError(str(e)) from e
    return s, data


def load_schedule(path: str | Path, topology: Any | None = None) -> Any:
    """Read a schedule file: JSON (format `autoccl-schedule` v1 or v2) or a stream (`autoccl synth --stream`,
    format `autoccl-schedule-stream` v1); docs/synth.md.

    With a topology, the schedule's ranks and links are resolved by name onto it (never by position): a rank
    or link the topology lacks, or an NPU of the topology the schedule does not name, is a ScheduleError.
    """
    try:
        with open(path, "rb") as f:
            magic = f.read(4)
    except OSError as e:
        raise ScheduleError(f"{path}: cannot read the schedule: {e}") from e
    s, data = _load_stream(path) if magic == b"ACSS" else _load_json(path)
    if topology is None:
        return s
    ranks = data.get("ranks")
    if not isinstance(ranks, list) or not all(isinstance(x, str) for x in ranks):
        raise ScheduleError(
            f"{path}: the schedule names no ranks, so it cannot be matched to a topology by name "
            "(`autoccl synth -o` writes them)"
        )
    links = data.get("links", [])
    if not isinstance(links, list) or not all(
        isinstance(x, list) and len(x) == 2 and all(isinstance(y, str) for y in x) for x in links
    ):
        raise ScheduleError(f"{path}: 'links' must be a list of [src, dst] node names")
    try:
        return ext().resolve_by_name(s, ranks, [(a, b) for a, b in links], topology)
    except ValueError as e:
        raise ScheduleError(f"{path}: {e}") from e
