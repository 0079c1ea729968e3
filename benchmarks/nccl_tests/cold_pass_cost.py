"""Where a cold search's time goes inside nccl-tests' timed loop, from `bench nccl-tests --trace` traces.

For each task of a traced online launch (rank 0's trace: the communicator's authority), the kernel time of
every call in a window of call indices (default 20-59: `-w 20 -n 40`'s out-of-place loop) against the median
of NCCL's own choice in the same launch, split by what the call ran:

- nccl: NCCL's choice (baseline samples, the duel's turns, a task that kept it);
- widest: a pair's first probe, at the widest channel count tried for that pair;
- narrower, lost: fewer channels of a pair whose widest probe was behind the best widest probe by more than
  --margin (where a collective's time only grows as channels fall, such points cannot win);
- narrower, leading: fewer channels of the leading pairs (the descent proper).

The excess of a class is the sum over its calls of (kernel time - NCCL's median), over the window's calls
times NCCL's median: what that class cost the loop, as a share of the loop's time under NCCL's choice. "Lost
pairs' wins" lists the points of lost pairs that beat the best widest probe anyway: what skipping them misses.

    python3 benchmarks/nccl_tests/cold_pass_cost.py <bench out>/traces/online --pass 0 --min-bytes 4M
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from autoccl.bench import nccl_tests as NT

CLASSES = ("nccl", "widest", "narrower, lost", "narrower, leading")


def task_calls(path: Path) -> dict[tuple[str, int], dict[int, dict[str, Any]]]:
    """Rank 0's calls per (collective, bytes): call index -> {cfg, gpu_us}."""
    tasks: dict[tuple[str, int], dict[int, dict[str, Any]]] = defaultdict(dict)
    with path.open() as f:
        for line in f:
            e = json.loads(line)
            if e.get("rank") != 0 or e.get("ev") not in ("call", "time"):
                continue
            calls = tasks[(e["coll"], int(e["bytes"]))]
            c = calls.setdefault(int(e["call"]), {})
            if e["ev"] == "call":
                c["cfg"] = (e["algo"], e["proto"], int(e["channels"])) if e["algo"] else None
            else:
                c["gpu_us"] = float(e["gpu_us"])
    return tasks


def account(calls: dict[int, dict[str, Any]], lo: int, hi: int, margin: float) -> dict[str, Any] | None:
    timed = {k: c for k, c in calls.items() if "gpu_us" in c and "cfg" in c}
    nccl = [c["gpu_us"] for c in timed.values() if c["cfg"] is None]
    if len(nccl) < 3:
        return None
    base = statistics.median(nccl)
    by_point: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for c in timed.values():
        if c["cfg"] is not None:
            by_point[c["cfg"]].append(c["gpu_us"])
    widest: dict[tuple[str, str], tuple[int, float]] = {}
    for (a, p, ch), xs in by_point.items():
        if (a, p) not in widest or ch > widest[(a, p)][0]:
            widest[(a, p)] = (ch, statistics.median(xs))
    best = min((t for _, t in widest.values()), default=base)
    # Points of lost pairs at fewer channels that beat the best widest probe anyway.
    missed = [
        f"{a}/{p}/{ch} {statistics.median(xs):.1f}"
        for (a, p, ch), xs in by_point.items()
        if ch < widest[(a, p)][0]
        and widest[(a, p)][1] > best * (1.0 + margin)
        and statistics.median(xs) < best * (1.0 - margin)
    ]
    excess = dict.fromkeys(CLASSES, 0.0)
    counts = dict.fromkeys(CLASSES, 0)
    window = [calls[k] for k in range(lo, hi + 1) if k in calls and "cfg" in calls[k]]
    for c in window:
        cfg = c["cfg"]
        if cfg is None:
            cls = "nccl"
        else:
            ch_w, t_w = widest[(cfg[0], cfg[1])]
            if cfg[2] >= ch_w:
                cls = "widest"
            elif t_w > best * (1.0 + margin):
                cls = "narrower, lost"
            else:
                cls = "narrower, leading"
        counts[cls] += 1
        excess[cls] += c.get("gpu_us", base) - base
    n = len(window)
    if n == 0:
        return None
    return {
        "nccl_us": base,
        "calls": n,
        "counts": counts,
        "excess": {k: v / (n * base) for k, v in excess.items()},
        "loop": 1.0 + sum(excess.values()) / (n * base),
        "best_widest_us": best,
        "missed": missed,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", type=Path, help="a folder of traces (bench nccl-tests --trace: traces/<mode>/)")
    ap.add_argument("--pass", dest="pass_no", type=int, default=0, help="the pass whose traces to read")
    ap.add_argument("--window", default="20-59", help="call indices of the timed loop [20-59]")
    ap.add_argument("--min-bytes", default="4M", help="smallest task [4M]")
    ap.add_argument("--margin", type=float, default=0.03, help="a widest probe this far behind the best lost")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.window.split("-"))
    rows = []
    for path in sorted(a.traces.glob(f"p{a.pass_no}_*.jsonl")):
        launch = "single" if "_single." in path.name else "mpi"
        if launch == "mpi" and any(r["file"] == path.name.split(".vm")[0] for r in rows):
            continue  # one process per GPU: rank 0's file is enough (rank 1's has no rank-0 events)
        for (coll, b), calls in sorted(task_calls(path).items()):
            if b < NT.size_arg(a.min_bytes):
                continue
            acc = account(calls, lo, hi, a.margin)
            if acc:
                rows.append(
                    {"file": path.name.split(".vm")[0], "launch": launch, "coll": coll, "bytes": b, **acc}
                )
    print(
        f"| launch | collective | size | NCCL µs | loop / NCCL's | {' | '.join(CLASSES)} | lost pairs' wins |"
    )
    print("| --- | --- | ---: | ---: | ---: |" + " ---: |" * len(CLASSES) + " --- |")
    for r in rows:
        parts = " | ".join(f"{100 * r['excess'][c]:+.1f} % ({r['counts'][c]})" for c in CLASSES)
        wins = ", ".join(r["missed"]) or "—"
        cell = f"{r['launch']} | {r['coll']} | {r['bytes'] >> 20} MiB"
        print(f"| {cell} | {r['nccl_us']:.1f} | {r['loop']:.3f} | {parts} | {wins} |")
    if rows:
        mean = {c: statistics.fmean(r["excess"][c] for r in rows) for c in CLASSES}
        loop = statistics.fmean(r["loop"] for r in rows)
        print(
            f"\nmean over {len(rows)} tasks: loop {loop:.3f}x NCCL's kernel time; "
            + "; ".join(f"{c} {100 * v:+.2f} %" for c, v in mean.items())
            + f"; tasks where a lost pair won at fewer channels: {sum(1 for r in rows if r['missed'])}"
        )
    else:  # every task of the first pass ran from a table, or none was traced: no timed loop searched
        print("\nno task searched in the first pass's timed loops")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
