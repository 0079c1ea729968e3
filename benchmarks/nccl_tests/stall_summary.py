#!/usr/bin/env python3
"""Per variant and rank of gpu_mpi_stall.sh: kernel-time medians by call range, segment lookups, waits.

python3 benchmarks/nccl_tests/stall_summary.py /tmp/st
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

RANGES = ((0, 24), (24, 60), (60, 120), (120, 200), (200, 260))


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/st")
    prefixes = sorted({f.name.split(".")[0] for f in root.glob("*.jsonl")})
    for pre in prefixes:
        times: dict[tuple[int, int], dict[int, float]] = defaultdict(dict)  # (rank, bytes) -> call -> us
        tasks = []
        for f in sorted(root.glob(f"{pre}.*jsonl")):
            for line in f.read_text(errors="replace").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if r.get("ev") == "time":
                    times[(int(r["rank"]), int(r["bytes"]))][int(r["call"])] = float(r["gpu_us"])
                elif r.get("ev") == "task":
                    tasks.append(r)
        print(f"## {pre}\n")
        print("| rank | MiB | " + " | ".join(f"calls {a}-{b - 1}" for a, b in RANGES) + " |")
        print("| --- | ---: |" + " ---: |" * len(RANGES))
        for (rank, nbytes), by_call in sorted(times.items()):
            cells = []
            for a, b in RANGES:
                v = [us for k, us in by_call.items() if a <= k < b]
                cells.append(f"{statistics.median(v):.1f}" if v else "-")
            print(f"| {rank} | {nbytes >> 20} | " + " | ".join(cells) + " |")
        print("\n| rank | MiB | config | lookups | lookup ms | max lookup ms | converged at | gain |")
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
        for t in sorted(tasks, key=lambda t: (int(t["bytes"]), int(t["rank"]))):
            cfg = "nccl" if t.get("algo") is None else f"{t['algo']}/{t['proto']}/{t.get('channels')}"
            look = t.get("lookups")
            ms = float(t.get("lookup_us") or 0) / 1000
            mx = float(t.get("lookup_max_us") or 0) / 1000
            print(
                f"| {t['rank']} | {int(t['bytes']) >> 20} | {cfg} | {look} | {ms:.1f} | {mx:.1f} "
                f"| {t.get('converged_at')} | {t.get('gain')} |"
            )
        print()


if __name__ == "__main__":
    main()
