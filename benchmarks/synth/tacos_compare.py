"""autoccl synth vs the public TACOS v1.3.0 on the same topologies and sizes (All-Gather, 1 GiB).

TACOS itself is never built or stored in this repository: benchmarks/results/synth/tacos_v1.3.0.md says how
it was built and run beside the project. This script runs our side and, given the directory of TACOS's JSON
outputs (one file per topology: {"npus", "chunk_bytes", "runs": [{"ag_time_us", "synth_s"}, ...]}), writes
the side-by-side table.

    nice python benchmarks/synth/tacos_compare.py --tacos-out /work/tacos-ref/out \
        --out benchmarks/results/synth/tacos_compare.json --md benchmarks/results/synth/tacos_compare.md

Same model as TACOS: links of 50 GiB/s (= 53.6870912 GB/s) and 0.5 us, one chunk per NPU of 2^30 / NPUs bytes
(TACOS: AllGather(npus, 1), chunkSize = 1024 MiB / npus), collective time = arrival of the last chunk.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

from autoccl import synth as S

GIB = 2**30 / 1e9
CASES = [
    ("mesh2d_16x16", "2D mesh 16x16", "mesh", [16, 16], None),
    ("mesh2d_32x32", "2D mesh 32x32", "mesh", [32, 32], None),
    ("torus3d_8x8x8", "3D torus 8x8x8", "torus", [8, 8, 8], None),
    ("torus3d_10x10x10", "3D torus 10x10x10", "torus", [10, 10, 10], None),
    ("mesh2d_hetero_5x5", "5x5 mesh, 50/75 GiB/s", "mesh", [5, 5], [50 * GIB, 75 * GIB]),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tacos-out", type=Path)
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("--md")
    a = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for key, label, kind, dims, dim_bw in CASES:
        kw: dict[str, Any] = {"bandwidth": 50 * GIB, "latency": 0.5}
        if dim_bw:
            kw["dim_bandwidth"] = dim_bw
        t = S.generate(kind, dims, **kw)
        size = float((2**30 // t.num_npus) * t.num_npus)  # TACOS: chunkSize = 1024 MiB / npus (integer)
        t0 = time.perf_counter()
        _one, _ = S.synthesize(t, "allgather", size, seeds=1, threads=1, record=False)
        one_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        best, st = S.synthesize(t, "allgather", size, seeds=a.seeds, threads=a.threads, record=False)
        all_s = time.perf_counter() - t0
        row: dict[str, Any] = {
            "topology": label,
            "npus": t.num_npus,
            "chunk_bytes": size / t.num_npus,
            "ours": {
                "seeds": a.seeds,
                "threads": a.threads,
                "best_ag_time_us": best.time_us,
                "seed_times_us": st["seed_times_us"],
                "synth_s_all_seeds": all_s,
                "synth_s_one_seed_one_thread": one_s,
            },
        }
        f = a.tacos_out / f"{key}.json" if a.tacos_out else None
        if f and f.exists() and f.read_text().rstrip().endswith("}"):
            d = json.loads(f.read_text())
            runs = d["runs"]
            tb = min(r["ag_time_us"] for r in runs)
            per = sum(r["synth_s"] for r in runs) / len(runs)
            row["tacos_v1.3.0"] = {
                "seeds": len(runs),
                "best_ag_time_us": tb,
                "worst_ag_time_us": max(r["ag_time_us"] for r in runs),
                "synth_s_per_seed": per,
                "synth_s_total": sum(r["synth_s"] for r in runs),
                "chunk_bytes": d["chunk_bytes"],
            }
            row["ag_time_ratio_ours_over_tacos"] = best.time_us / tb
            row["speedup_per_seed_single_thread"] = per / one_s
            row["speedup_same_seed_count"] = per * a.seeds / all_s
        rows.append(row)
        print(json.dumps(row)[:400], flush=True)
    res = {
        "hardware": {
            "cpu": platform.processor() or platform.machine(),
            "cores": os.cpu_count(),
            "loadavg_at_end": os.getloadavg(),
        },
        "rows": rows,
    }
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=2) + "\n")
    if a.md:
        lines = [
            "| topology | NPUs | TACOS v1.3.0 best AG (us) | seeds | ours best AG (us) | ratio | "
            "TACOS s/seed | ours s/seed (1 thread) | speedup/seed | ours 20 seeds wall (2 thr) | "
            "speedup (20 seeds) |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            tc = r.get("tacos_v1.3.0")
            o = r["ours"]
            if tc:
                lines.append(
                    f"| {r['topology']} | {r['npus']} | {tc['best_ag_time_us']:.2f} | {tc['seeds']} | "
                    f"{o['best_ag_time_us']:.2f} | {r['ag_time_ratio_ours_over_tacos']:.4f} | "
                    f"{tc['synth_s_per_seed']:.2f} | "
                    f"{o['synth_s_one_seed_one_thread']:.3f} | {r['speedup_per_seed_single_thread']:.1f}x | "
                    f"{o['synth_s_all_seeds']:.2f} | {r['speedup_same_seed_count']:.1f}x |"
                )
            else:
                lines.append(
                    f"| {r['topology']} | {r['npus']} | (not run) | | {o['best_ag_time_us']:.2f} | | | "
                    f"{o['synth_s_one_seed_one_thread']:.3f} | | {o['synth_s_all_seeds']:.2f} | |"
                )
        Path(a.md).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
