#!/usr/bin/env python3
"""Where an iteration's time goes, from the plugin's trace with every call timed (`time` records with
`t0_ns`, the GPU clock of the kernel's first channel start): per size, the median kernel duration of each
rank, the idle gap between a rank's consecutive kernels (large gaps: the GPU waited for the host), the
slowest rank's kernel (what the in-process board scores), the cross-rank start skew and the span from
the first rank's start to the last rank's end. Durations in microseconds. Skew and span compare different
GPUs' clocks, which are not synchronized (4 x H200: offsets of 250-370 us): read them only as a check of that.

Usage: kernel_gaps.py TRACE.jsonl [...] [--label NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def load(paths: list[str]) -> list[dict[str, object]]:
    out = []
    for p in paths:
        for line in Path(p).read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # torn last line of a killed process
            if r.get("ev") == "time" and "t0_ns" in r:
                out.append(r)
    return out


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def summarize(recs: list[dict[str, object]]) -> list[dict[str, object]]:
    by_size: dict[tuple[str, int], list[dict[str, object]]] = defaultdict(list)
    for r in recs:
        by_size[(str(r["coll"]), int(r["bytes"]))].append(r)  # type: ignore[arg-type]
    rows = []
    for (coll, nbytes), rs in sorted(by_size.items()):
        per_rank: dict[int, dict[int, dict[str, object]]] = defaultdict(dict)
        for r in rs:
            per_rank[int(r["rank"])][int(r["call"])] = r  # type: ignore[arg-type]
        dur, gap, period = [], [], []
        for calls in per_rank.values():
            for k, r in calls.items():
                dur.append(float(r["gpu_us"]))  # type: ignore[arg-type]
                nxt = calls.get(k + 1)
                if nxt is None:
                    continue
                t0, t1 = int(r["t0_ns"]), int(nxt["t0_ns"])  # type: ignore[arg-type]
                end = t0 + float(r["gpu_us"]) * 1000  # type: ignore[arg-type]
                period.append((t1 - t0) / 1000)
                gap.append((t1 - end) / 1000)
        slowest, skew, span = [], [], []
        calls_all = set().union(*[set(c) for c in per_rank.values()]) if per_rank else set()
        for k in calls_all:
            here = [c[k] for c in per_rank.values() if k in c]
            if len(here) != len(per_rank) or len(here) < 2:
                continue
            starts = [int(r["t0_ns"]) for r in here]  # type: ignore[arg-type]
            ends = [int(r["t0_ns"]) + float(r["gpu_us"]) * 1000 for r in here]  # type: ignore[arg-type]
            slowest.append(max(float(r["gpu_us"]) for r in here))  # type: ignore[arg-type]
            skew.append((max(starts) - min(starts)) / 1000)
            span.append((max(ends) - min(starts)) / 1000)
        cfg = {f"{r['nccl_algo']}/{r['nccl_proto']}/{r['nccl_channels']}" for r in rs}
        rows.append(
            {
                "coll": coll,
                "bytes": nbytes,
                "config": ",".join(sorted(cfg)),
                "ranks": len(per_rank),
                "samples": len(rs),
                "kernel_us": med(dur),
                "gap_us": med(gap),
                "period_us": med(period),
                "slowest_us": med(slowest),
                "skew_us": med(skew),
                "span_us": med(span),
            }
        )
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", nargs="+")
    ap.add_argument("--label", default="")
    args = ap.parse_args()
    rows = summarize(load(args.traces))
    if not rows:
        print(f"{args.label}: no timed calls with t0_ns in {len(args.traces)} trace file(s)")
        return 1
    print(f"\n{args.label}: medians per size (us)")
    cols = ["kernel_us", "gap_us", "period_us", "slowest_us", "skew_us", "span_us"]
    print("| coll | MiB | config | ranks | samples | " + " | ".join(cols) + " |")
    print("| --- | ---: | --- | ---: | ---: |" + " ---: |" * len(cols))
    for r in rows:
        vals = " | ".join(f"{r[c]:.1f}" for c in cols)
        head = f"| {r['coll']} | {r['bytes'] / 2**20:g} | {r['config']} | {r['ranks']} | {r['samples']}"
        print(f"{head} | {vals} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
