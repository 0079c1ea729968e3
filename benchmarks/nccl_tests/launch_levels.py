#!/usr/bin/env python3
"""How often each mode's averages sat at the slow one of the two levels a size's averages take from launch to
launch, from a `bench nccl-tests` folder's launches.jsonl (out-of-place and in-place averages of every pass).

With one process driving every GPU, a launch's 1-2 MiB averages sit near one of two times per call (on
2 x H200 about 14 or 21 us at 1 MiB), in every mode, plain NCCL's included: which one a launch gets decides
the cell's ratio. The two levels are split at the widest gap between the sorted averages of the size (all
modes together), or at --threshold.

    python3 benchmarks/nccl_tests/launch_levels.py benchmarks/results/h200x2/never-slower/small-cells \
        --launch single --size 1M
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from pathlib import Path

from autoccl.bench import nccl_tests as NT


def averages(folder: Path, launch: str, nbytes: int, colls: set[str] | None) -> dict[str, list[float]]:
    """Per mode: every out-of-place and in-place average (us per call) of the size, over passes and colls."""
    out: dict[str, list[float]] = defaultdict(list)
    records, _ = NT.read_launches(folder)
    for rec in records:
        if rec.get("rc") != 0 or rec["launch"] != launch or (colls and rec["coll"] not in colls):
            continue
        for row in rec["rows"]:
            if int(row["bytes"]) == nbytes:
                out[rec["mode"]] += [float(row["oop_time_us"]), float(row["ip_time_us"])]
    return dict(out)


def widest_gap(values: list[float]) -> float:
    """The midpoint of the widest gap between neighbouring sorted values."""
    v = sorted(values)
    if len(v) < 2:
        raise SystemExit("fewer than two averages: no levels to split")
    i = max(range(len(v) - 1), key=lambda j: v[j + 1] - v[j])
    return (v[i] + v[i + 1]) / 2


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path, help="a bench nccl-tests output folder (launches.jsonl)")
    ap.add_argument("--launch", default="single", help="single or mpi [single]")
    ap.add_argument("--size", default="1M", help="the cell's size [1M]")
    ap.add_argument("--colls", default="", help="collectives to count (comma-separated) [all]")
    ap.add_argument(
        "--threshold", type=float, default=None, help="us per call between the levels [the widest gap]"
    )
    a = ap.parse_args()
    colls = {c.strip() for c in a.colls.split(",") if c.strip()} or None
    per_mode = averages(a.folder, a.launch, NT.size_arg(a.size), colls)
    if not per_mode:
        raise SystemExit(f"no averages of {a.size} with launch {a.launch} in {a.folder}/launches.jsonl")
    cut = a.threshold if a.threshold is not None else widest_gap([t for v in per_mode.values() for t in v])
    print(f"{a.folder}: {a.launch}, {a.size}, levels split at {cut:.1f} us per call")
    print()
    print("| mode | averages | at the slow level | fast level median us | slow level median us |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for mode, times in sorted(per_mode.items(), key=lambda kv: (kv[0] != "plain", kv[0])):
        slow = sorted(t for t in times if t > cut)
        fast = sorted(t for t in times if t <= cut)
        fmed = f"{fast[len(fast) // 2]:.1f}" if fast else "—"
        smed = f"{slow[len(slow) // 2]:.1f}" if slow else "—"
        print(f"| {mode} | {len(times)} | {len(slow)} | {fmed} | {smed} |")


if __name__ == "__main__":
    main()
