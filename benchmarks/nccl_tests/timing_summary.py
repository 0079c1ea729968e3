#!/usr/bin/env python3
"""Per run of a trace folder (autoccl bench nccl-tests --trace): how many calls were timed in each phase,
how many samples the searches used, and the timestamp sanity of the samples (channel start spread).

    python3 benchmarks/nccl_tests/timing_summary.py /tmp/traces/mpi-online [--warmup 200 --per-cycle 84]

Phases by call index of a task: warm-up [0, warmup), then passes of `per_cycle` calls (nccl-tests -N: 40
out-of-place + 40 in-place timed iterations and the data-check calls). A timed call in the last pass means
the process had GPU timing on while busbw was being measured. "timing on in last pass": the share of rank 0's
calls of the last pass decided while the process's kernel-timing events were on (trace field `timing`;
"-" in traces without it), whether or not a sample was kept.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("folder")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--per-cycle", type=int, default=84)
    ap.add_argument("--cycles", type=int, default=3, help="nccl-tests -N: the last pass is the measured one")
    ap.add_argument("--spread-us", type=float, default=100.0, help="a start spread above this is suspect")
    a = ap.parse_args()
    runs: dict[str, list[Path]] = defaultdict(list)
    for f in sorted(Path(a.folder).glob("*.jsonl")):
        runs[f.name.rsplit("-", 1)[0]].append(f)
    print(
        "| run | calls | timed warm-up | timed per pass | tasks searched | samples used | lost | late | "
        "suspect spread | worst spread us | timing on in last pass |"
    )
    print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for run, files in runs.items():
        calls = 0
        timed_phase: dict[int, int] = defaultdict(int)
        spreads: list[float] = []
        suspect = 0
        samples = lost = late = searched = 0
        last_calls = last_on = 0
        has_flag = False
        for f in files:
            for line in f.read_text(errors="replace").splitlines():
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue
                ev = r.get("ev")
                if ev == "call" and r.get("rank") == 0:
                    calls += 1
                    k = int(r["call"])
                    if k >= a.warmup and (k - a.warmup) // a.per_cycle == a.cycles - 1:
                        last_calls += 1
                        has_flag = has_flag or "timing" in r
                        last_on += int(r.get("timing", 0))
                elif ev == "time" and r.get("rank") == 0:
                    k = int(r["call"])
                    phase = -1 if k < a.warmup else (k - a.warmup) // a.per_cycle
                    timed_phase[phase] += 1
                    sp = float(r.get("start_spread_us", 0.0))
                    spreads.append(sp)
                    suspect += sp > a.spread_us
                elif ev == "task" and r.get("rank") == 0 and "search_samples" in r:
                    searched += 1
                    samples += int(r["search_samples"])
                    lost += int(r.get("search_lost", 0))
                    late += int(r.get("search_late", 0))
        passes = ", ".join(f"{timed_phase[p]}" for p in sorted(timed_phase) if p >= 0)
        worst = max(spreads, default=0.0)
        on = f"{last_on}/{last_calls}" if has_flag else "-"
        print(
            f"| {run} | {calls} | {timed_phase.get(-1, 0)} | {passes} | {searched} | {samples} | {lost} | "
            f"{late} | {suspect} | {worst:.1f} | {on} |"
        )
        if spreads:
            print(f"<!-- {run}: median spread {statistics.median(spreads):.2f} us -->")


if __name__ == "__main__":
    main()
