#!/usr/bin/env python3
"""Online mode against plain NCCL (same iteration counts) and against the oracle, from sweep JSONL.

    python3 benchmarks/nccl_tests/online_report.py online.jsonl env_oracle_best.json --launch mpi
    python3 benchmarks/nccl_tests/online_report.py single_slowest.jsonl env_oracle_best.json \
        --plain single_plain.jsonl --launch single
Target cells: AG/RS/AR x 4/16/64/256/1024 MiB; geometric mean of busbw ratios. Repeated runs of a
cell (several rows) count by their median.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from collections import defaultdict

TARGET_MIB = (4, 16, 64, 256, 1024)


def select_cycle(rows: list[dict], which: str) -> list[dict]:
    """Rows of one nccl-tests pass (-N) per run; rows written before `cycle` existed count as pass 0."""
    if which == "all":
        return rows
    if which != "last":
        return [r for r in rows if r.get("cycle", 0) == int(which)]
    last: dict[tuple[str, str, str], int] = {}
    for r in rows:
        run = (r["plan"], r["launch"], r.get("label", ""))
        last[run] = max(last.get(run, 0), r.get("cycle", 0))
    return [r for r in rows if r.get("cycle", 0) == last[(r["plan"], r["launch"], r.get("label", ""))]]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("online")
    ap.add_argument("oracle")
    ap.add_argument("--launch", default="single")
    ap.add_argument("--plain", help="plain-NCCL rows from another file (default: those in `online`)")
    ap.add_argument("--plan", default="online", help="the tuned rows' plan (online, table)")
    ap.add_argument(
        "--cycle",
        default="last",
        help="which nccl-tests -N pass to compare: last (busbw after tuning), all, or its index",
    )
    a = ap.parse_args()
    rows = [r for r in map(json.loads, open(a.online)) if not r.get("summary")]
    if a.plain:
        rows += [r for r in map(json.loads, open(a.plain)) if not r.get("summary")]
    rows = select_cycle(rows, a.cycle)
    plain_runs: dict[tuple[str, int], list[float]] = defaultdict(list)
    online_runs: dict[tuple[str, int], list[float]] = defaultdict(list)
    for r in rows:
        if r["launch"] != a.launch:
            continue
        if r["plan"] == "plain-long":
            plain_runs[(r["coll"], r["bytes"])].append(r["busbw_gbs"])
        elif r["plan"] == a.plan:
            online_runs[(r["coll"], r["bytes"])].append(r["busbw_gbs"])
    plain = {k: statistics.median(v) for k, v in plain_runs.items()}
    online = {k: statistics.median(v) for k, v in online_runs.items()}
    oracle = {(r["coll"], r["bytes"]): r["oracle_busbw_gbs"] for r in json.load(open(a.oracle))}
    print(f"online ({a.launch}) vs plain NCCL, busbw GB/s (out-of-place)\n")
    print("| collective | size | plain | online | online/plain | oracle | online/oracle |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    target: list[float] = []
    vs_oracle: list[float] = []
    for key in sorted(online):
        coll, size = key
        p, o, orc = plain.get(key), online[key], oracle.get(key)
        r = o / p if p else math.nan
        ro = o / orc if orc else math.nan
        if coll in ("allgather", "reducescatter", "allreduce") and size >> 20 in TARGET_MIB:
            target.append(r)
            vs_oracle.append(ro)
            mark = " *"
        else:
            mark = ""
        print(
            f"| {coll}{mark} | {size >> 20} MiB | {p or 0:.1f} | {o:.1f} | {r:.3f} "
            f"| {orc or 0:.1f} | {ro:.3f} |"
        )
    if target:
        g = math.exp(sum(map(math.log, target)) / len(target))
        print(
            f"\n* target cells ({len(target)}): geometric mean online/plain = {g:.3f}, "
            f"min = {min(target):.3f}; "
            f"online/oracle: geometric mean {math.exp(sum(map(math.log, vs_oracle)) / len(vs_oracle)):.3f}, "
            f"min {min(vs_oracle):.3f}"
        )


if __name__ == "__main__":
    main()
