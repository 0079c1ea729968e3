"""Synthesis quality: gap to the bandwidth lower bound and speedup over the baselines (same simulator).

    nice python benchmarks/synth/suite.py --out suite.json

Every TACOS and baseline time here is the congestion-aware simulator's replay of the schedule on the topology
(for TACOS schedules it equals the synthesizer's estimate; the suite asserts it where the schedule is kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from typing import Any

from autoccl import synth as S

GIB = 2**30 / 1e9  # 50 GiB/s links, as in the TACOS paper and code


def topologies() -> list[tuple[str, str, Any]]:
    g = S.generate
    return [
        ("homogeneous", "mesh 8x8", g("mesh", [8, 8], bandwidth=50 * GIB, latency=0.5)),
        ("homogeneous", "hypercube 6 (64)", g("hypercube", [6], bandwidth=50 * GIB, latency=0.5)),
        ("homogeneous", "mesh 16x16", g("mesh", [16, 16], bandwidth=50 * GIB, latency=0.5)),
        ("homogeneous", "mesh 32x32", g("mesh", [32, 32], bandwidth=50 * GIB, latency=0.5)),
        ("homogeneous", "torus 8x8x8", g("torus", [8, 8, 8], bandwidth=50 * GIB, latency=0.5)),
        ("homogeneous", "torus 10x10x10", g("torus", [10, 10, 10], bandwidth=50 * GIB, latency=0.5)),
        (
            "heterogeneous",
            "mesh 5x5 (50/75 GiB/s)",
            g("mesh", [5, 5], dim_bandwidth=[50 * GIB, 75 * GIB], latency=0.5),
        ),
        (
            "heterogeneous",
            "mesh 8x8 (50/75 GiB/s)",
            g("mesh", [8, 8], dim_bandwidth=[50 * GIB, 75 * GIB], latency=0.5),
        ),
        (
            "heterogeneous",
            "3D Ring-FC-Switch 4x4x4 (200/100/50 GB/s)",
            g(
                "multidim",
                [4, 4, 4],
                dim_types=["ring", "fc", "switch"],
                dim_bandwidth=[200, 100, 50],
                latency=0.5,
            ),
        ),
        (
            "heterogeneous",
            "dragonfly 5x4 (local 100, global 25 GB/s)",
            g("dragonfly", [5, 4], bandwidth=100, global_bandwidth=25, latency=0.5, global_latency=1.0),
        ),
        (
            "multi-host",
            "4 hosts x 8 GPUs (NVSwitch 300 GB/s, NIC rails 25 GB/s)",
            g("cluster", [8, 4], bandwidth=300, latency=0.7, nic_bandwidth=25, nic_latency=3.0),
        ),
        (
            "multi-host",
            "8 hosts x 8 GPUs (NVSwitch 300 GB/s, 4 NIC rails 50 GB/s)",
            g("cluster", [8, 8], bandwidth=300, latency=0.7, nic_bandwidth=50, nic_latency=3.0, rails=4),
        ),
    ]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="1G")
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("--out")
    a = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for cls, name, t in topologies():
        for coll, chunks in [
            (c, k) for c in ("allgather", "allreduce") for k in (1, 4) if k == 1 or cls != "homogeneous"
        ]:
            keep = t.num_npus <= 300
            t0 = time.perf_counter()
            s, _ = S.synthesize(t, coll, a.size, chunks=chunks, seeds=a.seeds, threads=2, record=keep)
            synth_s = time.perf_counter() - t0
            lb = S.lower_bound(t, coll, a.size)
            row: dict[str, Any] = {
                "class": cls,
                "topology": name,
                "npus": t.num_npus,
                "collective": coll,
                "bytes": S.parse_size(a.size),
                "seeds": a.seeds,
                "chunks_per_npu": chunks,
                "tacos_us": s.time_us,
                "lower_bound_us": lb,
                "gap_to_lower_bound": s.time_us / lb - 1,
                "synthesis_s": synth_s,
                "baselines_us": {},
                "speedup": {},
            }
            if keep:
                sim = S.simulate(t, s)
                assert abs(sim["time_us"] - s.time_us) <= 1e-9 * s.time_us, (name, coll)
                row["checked"] = S.check(s, t)["ok"]
            if t.num_npus <= 300:
                for algo in S.BASELINES:
                    try:
                        b = S.baseline(t, algo, coll, a.size, chunks=chunks)
                    except ValueError:
                        continue
                    bt = S.simulate(t, b)["time_us"]
                    row["baselines_us"][algo] = bt
                    row["speedup"][algo] = bt / s.time_us
            rows.append(row)
            sp = ", ".join(f"{k} {v:.2f}x" for k, v in row["speedup"].items())
            print(
                f"{name:55s} {coll:10s} c={chunks} tacos {s.time_us:10.1f} us  "
                f"lb gap {100 * row['gap_to_lower_bound']:6.2f}%  "
                f"synth {synth_s:6.2f}s  {sp}",
                flush=True,
            )
    res = {
        "hardware": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "python": platform.python_version(),
        },
        "rows": rows,
    }
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
