"""The emulator's performance model in Python (same formula as csrc/emu/perf_model.cc), for calibration.

time_us = lat + steps*step + bus/bw + fill*steps*min(chunk, step_ch)/(bw/ch) + ceil(step_ch/chunk)*overhead
step_ch = bus/(ch*steps): a channel's data of one step; a chunk splits it into pieces that pipeline, the last
piece of each step (hop, and the receiver's copy out of its buffer) costing its transfer time (`fill`), every
piece a fixed cost (`chunk_overhead_us`)
bw = softmin(ch*bw_ch, bw_max) * coll_scale / (1 + load*(comm_slow + comm_slow_per_ch*ch/64))
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from autoccl import collectives, jsonout

COLLS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
PATHS = ("ring/simple", "ring/ll128", "ring/ll", "tree/simple", "tree/ll128", "tree/ll")
FORMAT = "autoccl-perfmodel/1"


@dataclass
class PathParams:
    lat_us: float = 6.0
    step_us: float = 1.0
    bw_ch_gbs: float = 15.0
    bw_max_gbs: float = 360.0
    knee: float = 4.0
    chunk_overhead_us: float = 0.1
    fill: float = 0.1


def _builtin_paths() -> dict[str, PathParams]:
    return {
        "ring/simple": PathParams(6.0, 1.2, 15.0, 360.0, 4.0, 0.1, 0.1),
        "ring/ll128": PathParams(5.0, 0.8, 14.0, 330.0, 4.0, 0.1, 0.1),
        "ring/ll": PathParams(4.0, 0.5, 6.0, 145.0, 4.0, 0.1, 0.1),
        "tree/simple": PathParams(7.0, 1.5, 10.0, 240.0, 4.0, 0.1, 0.1),
        "tree/ll128": PathParams(6.0, 1.0, 9.0, 220.0, 4.0, 0.1, 0.1),
        "tree/ll": PathParams(5.0, 0.6, 4.0, 100.0, 4.0, 0.1, 0.1),
    }


@dataclass
class PerfModel:
    paths: dict[str, PathParams] = field(default_factory=_builtin_paths)
    coll_bw_scale: dict[str, float] = field(default_factory=lambda: dict.fromkeys(COLLS, 1.0))
    noise: dict[str, float] = field(
        default_factory=lambda: {"sigma": 0.03, "outlier_p": 0.005, "outlier_min": 1.3, "outlier_max": 2.5}
    )
    load: dict[str, float] = field(
        default_factory=lambda: {
            "comm_slow": 0.8,
            "comm_slow_per_ch": 0.0,
            "gemm_base": 0.05,
            "gemm_per_ch": 0.3,
            # per protocol, a factor on gemm_per_ch (1: not calibrated; csrc/emu/perf_model.h)
            "gemm_proto_ll": 1.0,
            "gemm_proto_ll128": 1.0,
            "gemm_proto_simple": 1.0,
        }
    )
    meta: dict[str, Any] = field(default_factory=dict)

    @staticmethod
    def bus_factor(coll: str, nranks: int) -> float:
        """As the C++ model (perf_model.cc): a collective it does not know moves its buffer once."""
        try:
            return collectives.bus_factor(coll, nranks)
        except ValueError:
            return 1.0

    @staticmethod
    def steps(coll: str, algo: str, nranks: int) -> int:
        if algo == "tree":
            depth = 0
            while (1 << depth) < nranks:
                depth += 1
            return 2 * max(depth, 1)
        return 2 * (nranks - 1) if coll == "allreduce" else max(nranks - 1, 1)

    def path(self, algo: str, proto: str) -> PathParams:
        return self.paths.get(f"{algo}/{proto}", self.paths["ring/simple"])

    def mean_us(
        self,
        coll: str,
        nranks: int,
        nbytes: int,
        algo: str,
        proto: str,
        channels: int,
        chunk: int,
        load: float,
    ) -> float:
        pp = self.path(algo, proto)
        ch = max(channels, 1)
        st = self.steps(coll, algo, nranks)
        scale = self.coll_bw_scale.get(coll, 1.0)
        x = ch * pp.bw_ch_gbs * scale
        cap = pp.bw_max_gbs * scale
        bw = x / (1.0 + (x / cap) ** pp.knee) ** (1.0 / pp.knee)
        bw /= 1.0 + max(load, 0.0) * (self.load["comm_slow"] + self.load["comm_slow_per_ch"] * ch / 64.0)
        bus = nbytes * self.bus_factor(coll, nranks)
        step_ch = bus / (ch * st)
        t = pp.lat_us + st * pp.step_us + bus / (1000.0 * bw)
        if chunk > 0 and step_ch > 0:
            c = min(float(chunk), step_ch)
            t += pp.fill * st * c / (1000.0 * bw / ch)
            t += math.ceil(step_ch / chunk) * pp.chunk_overhead_us
        return t

    def gemm_slowdown(self, channels: int, load: float, proto: str | None = None) -> float:
        """The computation's slowdown beside a kernel on `channels` channels of `proto` (None: factor 1)."""
        per_ch = self.load["gemm_per_ch"] * (self.load.get(f"gemm_proto_{proto}", 1.0) if proto else 1.0)
        return 1.0 + max(load, 0.0) * (self.load["gemm_base"] + per_ch * max(channels, 1) / 64.0)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "meta": self.meta,
            "paths": {k: asdict(v) for k, v in self.paths.items()},
            "coll_bw_scale": self.coll_bw_scale,
            "noise": self.noise,
            "load": self.load,
        }

    def save(self, path: str | Path) -> None:
        Path(path).write_text(jsonout.dumps(self.to_json(), indent=1, sort_keys=True) + "\n")

    @classmethod
    def load_file(cls, path: str | Path) -> PerfModel:
        data = json.loads(Path(path).read_text())
        m = cls()
        for key, vals in data.get("paths", {}).items():
            base = asdict(m.paths.get(key, PathParams()))
            base.update({k: float(v) for k, v in vals.items() if k in base})
            m.paths[key] = PathParams(**base)
        m.coll_bw_scale.update({k: float(v) for k, v in data.get("coll_bw_scale", {}).items()})
        m.noise.update({k: float(v) for k, v in data.get("noise", {}).items()})
        m.load.update({k: float(v) for k, v in data.get("load", {}).items()})
        m.meta = dict(data.get("meta", {}))
        return m


def default_chunk(coll: str, algo: str, proto: str) -> int:
    """NCCL's default chunk (before per-size reductions) for a path, as the emulator applies it."""
    if proto == "ll":
        return 32768
    if proto == "ll128":
        return 576000
    return 2097152 if algo == "ring" and coll not in ("broadcast", "reduce") else 524288
