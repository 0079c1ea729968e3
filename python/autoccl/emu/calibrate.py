"""Fit the emulator's performance model to measurements.

    python -m autoccl.emu.calibrate <measurement files...> -o python/autoccl/data/perfmodel_h200x4.json

Accepted inputs (detected per file):
- nccl-tests environment sweeps ("=== <coll> <knob>" then "size:busbw" pairs, as in
  benchmarks/results/h200x4/emulator-calibration/nccl-tests-env-sweep.txt); rows with one knob of protocol,
  algorithm or channel count are used;
- torch interference runs (p2_*.jsonl: tag, coll, mb, load, bw, bw_load, gemm_slow): alone bandwidths and the
  effect of a light/heavy GEMM on the collective and of the collective's channels on the GEMM;
- oracle sweeps, JSONL lines
  {"coll","bytes","algo","proto","channels","nranks","busbw_gbs","time_us"[,"chunk"]};
- `autoccl bench coll` results (.json, kind "coll") with the oracle mode: each sweep launch forces one
  (algo, proto, channels) rule per collective, so its rows at load "none" are times of known configurations,
  and its rows under `--load light|heavy` give the collective's and the GEMM's slowdowns per channel count
  (`comm_slowdown`, `gemm_slowdown`) and protocol (LL's and LL128's weight on the GEMM's per-channel term,
  `load.gemm_proto_<name>`, fitted against Simple's where rows of both are there, as the contention plan of
  benchmarks/gpu/bench.sh measures them); the other modes' rows have no known configuration and are skipped;
- chunk probes, markdown tables as in benchmarks/results/h200x2/nccl-2.30-chunk-size (chunk_probe.md: per
  collective, rows `<algo>_<proto>_<channels>_chunk<bytes>` of busbw per size, chunk 0 = NCCL's own), measured
  on --probe-nranks GPUs.
Least squares on log(time) (scipy), with weak priors on every parameter so that parameters the data cannot
see stay at physically sensible values. The chunk terms (fill, chunk_overhead_us) are fitted per protocol on
the probes' time ratios to NCCL's chunk in the same cell (so the probe's GPU count and absolute level do not
bias the rest of the model) and applied to ring and tree alike; without probes they stay as they are. Prints
and stores the fit errors.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from autoccl import jsonout
from autoccl.emu.model import PATHS, PerfModel, default_chunk
from autoccl.settings import SettingError, parse_choice


class CalibrationError(RuntimeError):
    """Calibration cannot run here (its optional dependency is missing)."""


def least_squares(*args: Any, **kwargs: Any) -> Any:
    """scipy's least_squares: calibration is a maintainer's step, so scipy is the `calibrate` extra."""
    try:
        from scipy.optimize import least_squares as fit
    except ImportError:
        raise CalibrationError(
            "calibration needs scipy: pip install 'autoccl[calibrate]' (or scipy>=1.10)"
        ) from None
    return fit(*args, **kwargs)


COLL_ALIASES = {
    "all_gather": "allgather",
    "all_reduce": "allreduce",
    "reduce_scatter": "reducescatter",
    "allgather": "allgather",
    "allreduce": "allreduce",
    "reducescatter": "reducescatter",
    "broadcast": "broadcast",
    "reduce": "reduce",
}
DEFAULT_CHANNELS = 24
PATH_FIELDS = ("lat_us", "step_us", "bw_ch_gbs", "bw_max_gbs", "knee")
LOAD_FIELDS = ("comm_slow", "comm_slow_per_ch", "gemm_base", "gemm_per_ch")


@dataclass(frozen=True)
class Cell:
    """A measured collective: which, on how many GPUs, how large, on which path and channel count."""

    coll: str
    nranks: int
    nbytes: int
    algo: str
    proto: str
    channels: int


@dataclass(frozen=True)
class Point(Cell):
    time_us: float
    source: str
    chunk: int = 0
    weight: float = 1.0


@dataclass(frozen=True)
class LoadPoint:
    coll: str
    channels: int
    level: str  # light | heavy
    comm_ratio: float  # time under load / time alone
    gemm_slow: float
    source: str
    proto: str | None = None  # the kernel's protocol where known (oracle rows); None: weighs as Simple


def _time_from_busbw(coll: str, nranks: int, nbytes: int, busbw: float) -> float:
    return nbytes * PerfModel.bus_factor(coll, nranks) / (busbw * 1e3)


def parse_nccl_tests_sweep(path: Path, nranks: int = 4) -> list[Point]:
    points: list[Point] = []
    current: tuple[str, str] | None = None
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^=== (\w+) (\S+)$", line.strip())
        if m:
            current = (m.group(1), m.group(2))
            continue
        if current is None or ":" not in line or line.startswith(("vm:", "#")):
            continue
        coll = COLL_ALIASES.get(current[0])
        knob = current[1]
        cfg: tuple[str, str, int] | None = None
        if knob == "proto=Simple":
            cfg = ("ring", "simple", DEFAULT_CHANNELS)
        elif knob == "proto=LL128":
            cfg = ("ring", "ll128", DEFAULT_CHANNELS)
        elif knob == "proto=LL":
            cfg = ("ring", "ll", DEFAULT_CHANNELS)
        elif knob == "algo=Tree" and coll == "allreduce":
            cfg = ("tree", "simple", DEFAULT_CHANNELS)
        elif knob.startswith("nch="):
            cfg = ("ring", "simple", int(knob[4:]))
        if coll is None or cfg is None:
            continue
        for pair in line.split():
            size_s, _, bw_s = pair.partition(":")
            try:
                size, bw = int(size_s), float(bw_s)
            except ValueError:
                continue
            if bw <= 0:
                continue
            t = _time_from_busbw(coll, nranks, size, bw)
            points.append(Point(coll, nranks, size, cfg[0], cfg[1], cfg[2], t, path.name))
    return points


TORCH_TAGS = {
    "default": ("ring", "simple", DEFAULT_CHANNELS),
    "nch8": ("ring", "simple", 8),
    "nch16": ("ring", "simple", 16),
    "nch64": ("ring", "simple", 64),
    "ll128": ("ring", "ll128", DEFAULT_CHANNELS),
}


def parse_jsonl(path: Path, nranks: int = 4) -> tuple[list[Point], list[LoadPoint]]:
    points: list[Point] = []
    loads: list[LoadPoint] = []
    seen_alone: set[tuple[str, str, int]] = set()
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            r = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(r, dict):
            continue
        if "busbw_gbs" in r or "time_us" in r:  # oracle format
            coll = COLL_ALIASES.get(str(r.get("coll", "")))
            if coll is None or "algo" not in r or "proto" not in r:
                continue  # e.g. plain-NCCL rows: configuration unknown
            n = int(r.get("nranks", nranks))
            nbytes = int(r["bytes"])
            t = (
                float(r["time_us"])
                if "time_us" in r
                else _time_from_busbw(coll, n, nbytes, float(r["busbw_gbs"]))
            )
            if t <= 0:
                continue
            points.append(
                Point(
                    coll,
                    n,
                    nbytes,
                    str(r["algo"]).lower(),
                    str(r["proto"]).lower(),
                    int(r.get("channels") or DEFAULT_CHANNELS),  # 0 = NCCL's default (24 here)
                    t,
                    path.name,
                    chunk=int(r.get("chunk", 0)),
                )
            )
        elif "tag" in r and "bw_load" in r:  # torch interference probe
            tag = str(r["tag"])
            coll = COLL_ALIASES.get(str(r["coll"]))
            if tag not in TORCH_TAGS or coll is None:
                continue
            algo, proto, ch = TORCH_TAGS[tag]
            nbytes = int(r["mb"]) << 20
            key = (tag, coll, nbytes)
            if key not in seen_alone:
                seen_alone.add(key)
                t = _time_from_busbw(coll, nranks, nbytes, float(r["bw"]))
                points.append(Point(coll, nranks, nbytes, algo, proto, ch, t, path.name, weight=0.5))
            loads.append(
                LoadPoint(
                    coll,
                    ch,
                    str(r["load"]),
                    float(r["bw"]) / float(r["bw_load"]),
                    float(r["gemm_slow"]),
                    path.name,
                )
            )
    return points, loads


@dataclass(frozen=True)
class ChunkRatio(Cell):
    """A chunk against NCCL's own in one cell: time(chunk) / time(NCCL's chunk)."""

    chunk: int
    ratio: float
    source: str


_PROBE_SIZES = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def _probe_size(label: str) -> int:
    m = re.fullmatch(r"(\d+)([KMG])", label.strip())
    if not m:
        raise ValueError(f"chunk probe: size column {label!r} is not like 4M or 1G")
    return int(m.group(1)) * _PROBE_SIZES[m.group(2)]


def parse_chunk_probe(path: Path, nranks: int) -> list[ChunkRatio]:
    """Ratios of each chunk row to the chunk-0 row (NCCL's chunk) of the same collective and path."""
    out: list[ChunkRatio] = []
    coll: str | None = None
    sizes: list[int] = []
    rows: dict[tuple[str, str, int], dict[int, list[float]]] = {}
    for line in path.read_text(errors="replace").splitlines():
        head = re.match(r"^## (\w+):", line)
        if head:
            coll = COLL_ALIASES.get(head.group(1))
            sizes = []
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if coll is None or len(cells) < 2:
            continue
        if cells[0] == "configuration":
            sizes = [_probe_size(c) for c in cells[1:] if c and c != "data errors"]
            continue
        row = re.fullmatch(r"(ring|tree)_(ll128|ll|simple)_(\d+)_chunk(\d+)", cells[0])
        if row is None or not sizes:
            continue
        errors = cells[1 + len(sizes)] if len(cells) > 1 + len(sizes) else "0"
        if errors not in ("0", ""):
            continue  # wrong results: not a measurement of that chunk
        busbw = [float(c.split()[0]) for c in cells[1 : 1 + len(sizes)]]
        key = (coll, f"{row.group(1)}/{row.group(2)}", int(row.group(3)))
        rows.setdefault(key, {})[int(row.group(4))] = busbw
        for n, bw in zip(sizes, busbw, strict=True):
            if bw <= 0:
                raise ValueError(f"{path}: {cells[0]} has busbw {bw} at {n} B")
    for (c, path_key, ch), by_chunk in rows.items():
        base = by_chunk.get(0)
        if base is None:
            continue  # no row of NCCL's chunk to compare with
        algo, proto = path_key.split("/")
        for chunk, busbw in by_chunk.items():
            if chunk == 0:
                continue
            for n, b0, b in zip(sizes, base, busbw, strict=True):
                out.append(ChunkRatio(c, nranks, n, algo, proto, ch, chunk, b0 / b, path.name))
    return out


def _chunk_ratio(model: PerfModel, r: ChunkRatio) -> float:
    ours = model.mean_us(r.coll, r.nranks, r.nbytes, r.algo, r.proto, r.channels, r.chunk, 0.0)
    nccl = model.mean_us(
        r.coll, r.nranks, r.nbytes, r.algo, r.proto, r.channels, default_chunk(r.coll, r.algo, r.proto), 0.0
    )
    return ours / nccl


def fit_chunk(ratios: list[ChunkRatio], model: PerfModel) -> dict[str, dict[str, float]]:
    """fill and chunk_overhead_us per protocol, on log ratios (robust loss: one noisy cell, e.g. a slow pass
    of NCCL's chunk, must not set them); the same values for the ring and tree paths of that protocol."""
    out: dict[str, dict[str, float]] = {}
    for proto in sorted({r.proto for r in ratios}):
        mine = [r for r in ratios if r.proto == proto]
        keys = [p for p in PATHS if p.endswith("/" + proto)]
        before = float(np.sqrt(np.mean([math.log(_chunk_ratio(model, r) / r.ratio) ** 2 for r in mine])))

        def residuals(x: np.ndarray, mine: list[ChunkRatio] = mine, keys: list[str] = keys) -> np.ndarray:
            for k in keys:
                model.paths[k].fill, model.paths[k].chunk_overhead_us = float(x[0]), float(x[1])
            return np.array([math.log(_chunk_ratio(model, r) / r.ratio) for r in mine])

        p0 = model.paths[keys[0]]
        sol = least_squares(
            residuals,
            [p0.fill, p0.chunk_overhead_us],
            bounds=([0.0, 0.0], [2.0, 20.0]),
            loss="soft_l1",
            f_scale=0.02,
        )
        residuals(sol.x)
        out[proto] = {
            "points": len(mine),
            "fill": float(sol.x[0]),
            "chunk_overhead_us": float(sol.x[1]),
            "rms_log_before": before,
            "rms_log": float(np.sqrt(np.mean(sol.fun**2))),
        }
    return out


def _rule(text: str) -> tuple[str, str, int] | None:
    """An oracle rule `algo/proto[/channels]` (no channels: NCCL's count, DEFAULT_CHANNELS here); None for
    a rule that forces a chunk (the points here are at NCCL's chunk) or is not one the plugin takes."""
    try:
        choice = parse_choice(text)
    except SettingError:
        return None
    if choice.chunk is not None:
        return None
    return choice.algo, choice.proto, DEFAULT_CHANNELS if choice.channels is None else choice.channels


def parse_bench_coll(path: Path, doc: dict[str, Any]) -> tuple[list[Point], list[LoadPoint]]:
    """Points and load points of an `autoccl bench coll` result: its oracle sweep rows (module doc)."""
    rules: dict[str, dict[str, str]] = {}
    for launch in doc.get("launches") or []:
        if isinstance(launch, dict) and launch.get("mode") == "oracle":
            rules[str(launch.get("label"))] = dict((launch.get("params") or {}).get("rules") or {})
    points: list[Point] = []
    loads: list[LoadPoint] = []
    for r in doc.get("rows") or []:
        if (
            not isinstance(r, dict)
            or r.get("mode") != "oracle"
            or r.get("phase") != "sweep"
            or r.get("skipped")
        ):
            continue
        coll = COLL_ALIASES.get(str(r.get("coll")))
        rule = rules.get(str(r.get("launch")), {}).get(str(r.get("coll")))
        config = _rule(rule) if rule else None
        if coll is None or config is None or r.get("check") == "FAIL":
            continue
        algo, proto, channels = config
        load = str(r.get("load", "none"))
        t = float(r.get("time_us") or 0)
        if load == "none" and t > 0:
            n = int(r.get("world_size", 0)) or 4
            points.append(Point(coll, n, int(r["bytes"]), algo, proto, channels, t, path.name))
        elif load in ("light", "heavy") and r.get("comm_slowdown") and r.get("gemm_slowdown"):
            comm, gemm = float(r["comm_slowdown"]), float(r["gemm_slowdown"])
            if comm > 0 and gemm > 0 and math.isfinite(comm) and math.isfinite(gemm):
                loads.append(LoadPoint(coll, channels, load, comm, gemm, path.name, proto))
    return points, loads


def load_measurements(paths: Sequence[Path]) -> tuple[list[Point], list[LoadPoint]]:
    points: list[Point] = []
    loads: list[LoadPoint] = []
    for p in paths:
        if p.suffix == ".md":
            continue  # chunk probes: load_chunk_probes
        if p.suffix == ".jsonl":
            a, b = parse_jsonl(p)
            points += a
            loads += b
        elif p.suffix == ".json":
            try:
                doc = json.loads(p.read_text())
            except json.JSONDecodeError as e:
                raise CalibrationError(f"{p}: not JSON ({e})") from None
            if not isinstance(doc, dict) or doc.get("kind") != "coll":
                raise CalibrationError(f"{p}: not an `autoccl bench coll` result (kind 'coll')")
            a, b = parse_bench_coll(p, doc)
            points += a
            loads += b
        else:
            points += parse_nccl_tests_sweep(p)
    return points, loads


def _pack(model: PerfModel, paths: list[str]) -> np.ndarray:
    vals: list[float] = []
    for key in paths:
        pp = model.paths[key]
        vals += [math.log(getattr(pp, f)) for f in PATH_FIELDS]
    vals += [math.log(model.coll_bw_scale["allgather"]), math.log(model.coll_bw_scale["reducescatter"])]
    return np.array(vals)


def _unpack(model: PerfModel, paths: list[str], x: np.ndarray) -> None:
    i = 0
    for key in paths:
        pp = model.paths[key]
        for f in PATH_FIELDS:
            setattr(pp, f, float(math.exp(x[i])))
            i += 1
    model.coll_bw_scale["allgather"] = float(math.exp(x[i]))
    model.coll_bw_scale["reducescatter"] = float(math.exp(x[i + 1]))


def fit_bandwidth(points: list[Point], model: PerfModel, prior_weight: float = 0.05) -> dict[str, float]:
    paths = [p for p in PATHS if any(f"{q.algo}/{q.proto}" == p for q in points)]
    x0 = _pack(model, paths)
    prior = x0.copy()

    def residuals(x: np.ndarray) -> np.ndarray:
        _unpack(model, paths, x)
        res = [q.weight * math.log(_predict_us(model, q) / q.time_us) for q in points]
        return np.concatenate([np.array(res), prior_weight * (x - prior)])

    sol = least_squares(residuals, x0, method="trf")
    _unpack(model, paths, sol.x)
    return fit_error(points, model)


def _predict_us(model: PerfModel, q: Point) -> float:
    """The model's unloaded mean time for a measured point (its chunk, else the protocol's default)."""
    return model.mean_us(
        q.coll,
        q.nranks,
        q.nbytes,
        q.algo,
        q.proto,
        q.channels,
        q.chunk or default_chunk(q.coll, q.algo, q.proto),
        0.0,
    )


def fit_error(points: list[Point], model: PerfModel) -> dict[str, float]:
    errs = np.array([_predict_us(model, q) / q.time_us - 1.0 for q in points])
    if errs.size == 0:
        return {"points": 0}
    return {
        "points": int(errs.size),
        "mape_pct": float(100 * np.mean(np.abs(errs))),
        "median_ape_pct": float(100 * np.median(np.abs(errs))),
        "max_ape_pct": float(100 * np.max(np.abs(errs))),
        "rms_log": float(np.sqrt(np.mean(np.log1p(errs) ** 2))),
    }


# Protocols whose GEMM weight the fit frees when their rows are there; Simple (and rows of no known protocol)
# is the reference at weight 1, so that the weights and gemm_per_ch are not one product.
WEIGHTED_PROTOS = ("ll", "ll128")


def fit_load(loads: list[LoadPoint], model: PerfModel) -> dict[str, float]:
    """The contention law: the collective's and the GEMM's slowdowns by channels and load level, and, where
    rows of LL or LL128 under load are there beside Simple's, the GEMM's per-protocol weight on its
    per-channel term (load.gemm_proto_<name>; the others keep theirs)."""
    if not loads:
        return {"points": 0}
    weighted = (
        [p for p in WEIGHTED_PROTOS if any(lp.proto == p for lp in loads)]
        if any(lp.proto in (None, "simple") for lp in loads)
        else []
    )
    x0 = np.array([model.load[f] for f in LOAD_FIELDS] + [0.5] + [1.0] * len(weighted))
    # A protocol whose weight is not fitted keeps the start model's, relative to Simple's: Simple's is then 1
    # where weights are fitted (the reference), else the start model's too (rows of no known protocol are
    # Simple's), so that the fit predicts with the weights the written model holds.
    kept = {p: model.load.get(f"gemm_proto_{p}", 1.0) for p in ("ll", "ll128", "simple")}
    if weighted:
        kept = {p: w / kept["simple"] for p, w in kept.items()} if kept["simple"] > 0 else kept
        kept["simple"] = 1.0

    def predict(x: np.ndarray, lp: LoadPoint) -> tuple[float, float]:
        cs, cspc, gb, gpc, light = x[:5]
        if lp.proto in weighted:
            w = float(x[5 + weighted.index(lp.proto)])
        else:
            w = kept.get(lp.proto or "simple", 1.0)
        lv = light if lp.level == "light" else 1.0
        comm = 1.0 + lv * (cs + cspc * lp.channels / 64.0)
        gemm = 1.0 + lv * (gb + gpc * w * lp.channels / 64.0)
        return comm, gemm

    def residuals(x: np.ndarray) -> np.ndarray:
        out: list[float] = []
        for lp in loads:
            comm, gemm = predict(x, lp)
            out.append(math.log(max(comm, 1e-6) / lp.comm_ratio))
            out.append(math.log(max(gemm, 1e-6) / lp.gemm_slow))
        return np.array(out)

    lower = [0, -1, 0, 0, 0.01] + [0.05] * len(weighted)
    upper = [10, 10, 5, 5, 1.0] + [20.0] * len(weighted)
    sol = least_squares(residuals, x0, bounds=(lower, upper))
    for f, v in zip(LOAD_FIELDS, sol.x[:4], strict=True):
        model.load[f] = float(v)
    for p, w in kept.items():
        model.load[f"gemm_proto_{p}"] = w
    for p, v in zip(weighted, sol.x[5:], strict=True):
        model.load[f"gemm_proto_{p}"] = float(v)
    comm_err = [abs(predict(sol.x, lp)[0] / lp.comm_ratio - 1) for lp in loads]
    gemm_err = [abs(predict(sol.x, lp)[1] / lp.gemm_slow - 1) for lp in loads]
    out = {
        "points": len(loads),
        "light_level": float(sol.x[4]),
        "comm_mape_pct": float(100 * np.mean(comm_err)),
        "gemm_mape_pct": float(100 * np.mean(gemm_err)),
    }
    out.update({f"gemm_proto_{p}": float(v) for p, v in zip(weighted, sol.x[5:], strict=True)})
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m autoccl.emu.calibrate", description=__doc__.split("\n")[0])
    ap.add_argument("measurements", nargs="+", type=Path)
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--start", type=Path, help="start from this model file (default: built-in priors)")
    ap.add_argument("--hardware", default="NVIDIA H200x4")
    ap.add_argument(
        "--probe-nranks", type=int, default=2, help="GPUs the chunk probes (.md) were measured on"
    )
    args = ap.parse_args(argv)
    try:
        points, loads = load_measurements(args.measurements)
    except CalibrationError as e:
        print(e, file=sys.stderr)
        return 2
    try:
        ratios = [
            r for p in args.measurements if p.suffix == ".md" for r in parse_chunk_probe(p, args.probe_nranks)
        ]
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    if not points:
        print("no usable measurements", file=sys.stderr)
        return 2
    model = PerfModel.load_file(args.start) if args.start else PerfModel()
    before = fit_error(points, model)
    # The chunk terms move the times of NCCL's chunk a little and the ratios hardly depend on the bandwidths:
    # chunk, bandwidth, chunk again.
    try:
        chunk_fit = fit_chunk(ratios, model) if ratios else {}
        fit = fit_bandwidth(points, model)
        if ratios:
            chunk_fit = fit_chunk(ratios, model)
            fit = fit_error(points, model)
        load_fit = fit_load(loads, model)
    except CalibrationError as e:
        print(e, file=sys.stderr)
        return 2
    model.meta = {
        "hardware": args.hardware,
        "sources": sorted({p.name for p in args.measurements}),
        "fit_before": before,
        "fit": fit,
        "load_fit": load_fit,
        "chunk_fit": chunk_fit,
        "note": "small-message latencies are priors; chunk terms are "
        + (
            f"fitted on chunk probes of {args.probe_nranks} GPUs (ring; tree assumed alike)"
            if ratios
            else "priors"
        ),
    }
    model.save(args.output)
    fits = {"fit_before": before, "fit": fit, "load_fit": load_fit, "chunk_fit": chunk_fit}
    print(jsonout.dumps(fits, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
