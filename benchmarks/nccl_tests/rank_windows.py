#!/usr/bin/env python3
"""Per-rank kernel windows of one-process runs (ranks of a communicator in one process), from kept traces.

    python3 benchmarks/nccl_tests/rank_windows.py /tmp/traces/single-online1 [--task reducescatter:16777216]

Prints, per trace file and collective, which rank had the shortest window among the calls whose ranks'
windows differ by more than 15 % (the rank NCCL's group launch started last waits for no other launch);
with --task, the median window per rank of that task's calls under NCCL's choice and under each pinned or
tried configuration (rank 0's call records give the configuration).
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import Counter, defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--task", default="", help="coll:bytes, e.g. reducescatter:16777216")
    a = ap.parse_args()
    for f in sorted(Path(a.folder).glob("*.jsonl")):
        times: dict[tuple[str, int, int], dict[int, float]] = defaultdict(dict)
        cfg: dict[tuple[str, int, int], str] = {}
        for line in f.read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            key = (r.get("coll", ""), int(r.get("bytes", 0)), int(r.get("call", -1)))
            if r.get("ev") == "time":
                times[key][int(r["rank"])] = float(r["gpu_us"])
            elif r.get("ev") == "call" and r.get("rank") == 0:
                cfg[key] = f"{r['algo']}/{r['proto']}/{r['channels']}" if r.get("algo") else "NCCL's choice"
        shortest: dict[str, Counter[int]] = defaultdict(Counter)
        nranks = max((len(v) for v in times.values()), default=0)
        for (coll, _, _), w in times.items():
            if len(w) == nranks and max(w.values()) > 1.15 * min(w.values()):
                shortest[coll][min(w, key=lambda r: w[r])] += 1
        for coll, c in sorted(shortest.items()):
            n = sum(c.values())
            by_rank = dict(sorted(c.items()))
            print(f"{f.name} {coll}: shortest window by rank {by_rank}, rank 0 {c[0] / n:.0%} of {n}")
        if a.task:
            coll, nbytes = a.task.split(":")
            per: dict[str, list[list[float]]] = {}
            for key, w in times.items():
                if key[0] == coll and key[1] == int(nbytes) and len(w) == nranks and key in cfg:
                    ws = per.setdefault(cfg[key], [[] for _ in range(nranks)])
                    for r, us in w.items():
                        ws[r].append(us)
            for name, ws in sorted(per.items()):
                med = " / ".join(f"{statistics.median(x):.0f}" for x in ws if x)
                print(f"{f.name} {a.task} {name}: {len(ws[0])} calls, median window per rank {med} us")


if __name__ == "__main__":
    main()
