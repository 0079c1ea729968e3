#!/usr/bin/env python3
"""Summary and plot of an online-vs-plain nccl-tests comparison (the rows `gpu_cycles_check.sh` writes).

    python3 benchmarks/busbw_summary.py benchmarks/results/h200x4/nccl-tests-online/run \
        --title "4 x H200, NCCL 2.28.9" --png benchmarks/results/h200x4/nccl-tests-online/busbw_ratio.png

A folder holds `<launch>_online.jsonl` and `<launch>_plain.jsonl` per launch kind (`mpi`: one process per GPU,
`single`: one process for all GPUs), one JSON row per (run, collective, size, nccl-tests pass). Per cell the
ratio is the median online busbw over the median plain busbw of the last pass (as `online_report.py` has
it); the spread is each online run's geometric mean against plain's median. Writes summary.json beside the
rows (or where --json says) and, with --png, one panel per collective.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

TARGET_MIB = (4, 16, 64, 256, 1024)
TARGET_COLLS = ("allgather", "reducescatter", "allreduce")
LAUNCH_NAMES = {"mpi": "one process per GPU", "single": "one process for all GPUs"}
Cell = tuple[str, int]


def last_pass_runs(path: Path) -> dict[Cell, list[float]]:
    """busbw of the last nccl-tests pass per cell, one value per run, in file order."""
    rows = [r for r in map(json.loads, path.read_text().splitlines()) if not r.get("summary")]
    last: dict[tuple[str, str], int] = {}
    for r in rows:
        key = (r["plan"], r.get("label", ""))
        last[key] = max(last.get(key, 0), r.get("cycle", 0))
    runs: dict[Cell, list[float]] = defaultdict(list)
    for r in rows:
        if r.get("cycle", 0) == last[(r["plan"], r.get("label", ""))]:
            runs[(r["coll"], int(r["bytes"]))].append(float(r["busbw_gbs"]))
    return runs


def run_checks(path: Path) -> dict[str, int]:
    """What the runs' summary rows say: data errors, runs that failed, calls compared across ranks."""
    out = {"runs": 0, "failed_runs": 0, "wrong": 0, "calls_compared": 0, "divergent_calls": 0}
    for r in map(json.loads, path.read_text().splitlines()):
        if r.get("summary"):
            out["runs"] += 1
            out["failed_runs"] += int(not r.get("ok", False))
            out["wrong"] += int(r.get("wrong", 0))
            trace = r.get("trace") or {}
            out["calls_compared"] += int(trace.get("calls_compared", 0))
            out["divergent_calls"] += int(trace.get("divergent_calls", 0))
    return out


def geomean(values: list[float]) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def summarize(online: dict[Cell, list[float]], plain: dict[Cell, list[float]]) -> dict[str, Any]:
    cells = sorted(c for c in online if c in plain and all(v > 0 for v in plain[c]))
    ratio = {c: statistics.median(online[c]) / statistics.median(plain[c]) for c in cells}
    target = [c for c in cells if c[0] in TARGET_COLLS and c[1] // 2**20 in TARGET_MIB and c[1] % 2**20 == 0]
    if not target:
        raise ValueError("no target cell (AG/RS/AR x 4/16/64/256/1024 MiB) in both files")
    n_runs = min(len(online[c]) for c in target)
    per_run = [geomean([online[c][i] / statistics.median(plain[c]) for c in target]) for i in range(n_runs)]
    worst = min(target, key=lambda c: ratio[c])
    return {
        "target_geomean": round(geomean([ratio[c] for c in target]), 6),
        "target_min": round(ratio[worst], 4),
        "target_min_cell": f"{worst[0]} {worst[1] // 2**20} MiB",
        "online_runs": n_runs,
        "plain_runs": min(len(plain[c]) for c in target),
        "per_run_geomean": [round(v, 6) for v in per_run],
        "cells": [
            {
                "coll": c[0],
                "bytes": c[1],
                "target": c in target,
                "plain_busbw_gbs": round(statistics.median(plain[c]), 2),
                "online_busbw_gbs": round(statistics.median(online[c]), 2),
                "ratio": round(ratio[c], 4),
                "ratio_min": round(min(online[c]) / statistics.median(plain[c]), 4),
                "ratio_max": round(max(online[c]) / statistics.median(plain[c]), 4),
            }
            for c in cells
        ],
    }


def plot(summary: dict[str, dict[str, Any]], title: str, png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colls = [c for c in TARGET_COLLS if any(x["coll"] == c for s in summary.values() for x in s["cells"])]
    fig, axes = plt.subplots(1, len(colls), figsize=(3.6 * len(colls), 3.2), sharey=True, squeeze=False)
    for ax, coll in zip(axes[0], colls, strict=True):
        for launch, s in summary.items():
            xs = [x for x in s["cells"] if x["coll"] == coll]
            mib = [x["bytes"] / 2**20 for x in xs]
            name = LAUNCH_NAMES.get(launch, launch)
            line = ax.plot(mib, [x["ratio"] for x in xs], marker="o", ms=3, label=name)
            ax.fill_between(
                mib,
                [x["ratio_min"] for x in xs],
                [x["ratio_max"] for x in xs],
                alpha=0.2,
                color=line[0].get_color(),
            )
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log", base=2)
        ax.set_title(coll)
        ax.set_xlabel("size (MiB)")
    axes[0][0].set_ylabel("busbw online / plain NCCL")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(png, dpi=80)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", type=Path, help="folder with <launch>_online.jsonl and <launch>_plain.jsonl")
    ap.add_argument("--online-name", default="online", help="file stem after '<launch>_' of the tuned runs")
    ap.add_argument("--json", type=Path, help="where to write the summary (default: <folder>/summary.json)")
    ap.add_argument("--png", type=Path, help="write a plot of every cell's ratio here")
    ap.add_argument("--title", default="", help="the plot's title")
    args = ap.parse_args()
    summary: dict[str, dict[str, Any]] = {}
    for launch in ("mpi", "single"):
        on, pl = args.folder / f"{launch}_{args.online_name}.jsonl", args.folder / f"{launch}_plain.jsonl"
        if on.exists() and pl.exists():
            try:
                summary[launch] = summarize(last_pass_runs(on), last_pass_runs(pl))
                summary[launch]["checks_online"] = run_checks(on)
                summary[launch]["checks_plain"] = run_checks(pl)
            except (ValueError, KeyError) as e:
                print(f"busbw_summary: {on}: {e}", file=sys.stderr)
                return 1
    if not summary:
        print(
            f"busbw_summary: no <launch>_{args.online_name}.jsonl with its _plain.jsonl in {args.folder}",
            file=sys.stderr,
        )
        return 1
    out = args.json or args.folder / "summary.json"
    out.write_text(json.dumps(summary, indent=1) + "\n")
    for launch, s in summary.items():
        runs = ", ".join(f"{v:.3f}" for v in s["per_run_geomean"])
        print(
            f"{launch}: target cells {s['target_geomean']:.3f}x (runs {runs}), min {s['target_min']:.3f}x "
            f"({s['target_min_cell']})"
        )
    if args.png:
        plot(summary, args.title, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
