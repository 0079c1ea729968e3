#!/usr/bin/env python3
"""Per-pass tables of nccl-tests logs named <coll>-<variant>-<rep>.log (gpu_single_stability.sh,
gpu_overhead_split.sh): out-of-place us per call for every pass of every run, optionally the median over
all passes per variant; data errors are reported first.

    python3 benchmarks/nccl_tests/pass_tables.py /tmp/stab/logs --order plain,plain64,online64 [--medians]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import sweep

Runs = dict[tuple[str, str], list[tuple[int, list[dict]]]]


def load(logdir: Path) -> Runs:
    runs: Runs = {}
    for p in sorted(logdir.glob("*.log")):
        m = re.match(r"(.+)-([a-z0-9]+)-(\d+)\.log", p.name)
        if not m:
            continue
        coll, variant, rep = m.groups()
        rows = sweep.parse_rows(p.read_text())
        runs.setdefault((coll, variant), []).append((int(rep), rows))
        wrong = sum((r["oop_wrong"] or 0) + (r["ip_wrong"] or 0) for r in rows)
        if wrong:
            print(f"DATA ERRORS {p}: {wrong}")
    return runs


def tables(runs: Runs, order: list[str], medians: bool) -> list[str]:
    out: list[str] = []
    for coll in sorted({c for c, _ in runs}):
        sizes = sorted(
            {r["bytes"] for (c, _), lst in runs.items() if c == coll for _, rows in lst for r in rows}
        )
        head = " | ".join(f"{b >> 20} MiB" for b in sizes)
        out += [f"\n## {coll}: out-of-place us per call, one process for 4 GPUs; every pass (rep.pass)\n"]
        out += [f"| variant | pass | {head} |", "| --- | --- |" + " ---: |" * len(sizes)]
        for v in order:
            for rep, rows in sorted(runs.get((coll, v), []), key=lambda x: x[0]):
                for cyc in sorted({r["cycle"] for r in rows}):
                    t = {r["bytes"]: r["oop_time_us"] for r in rows if r["cycle"] == cyc}
                    cells = " | ".join(f"{t[b]:.1f}" if b in t else "-" for b in sizes)
                    out.append(f"| {v} | {rep}.{cyc} | {cells} |")
        if not medians:
            continue
        out += [f"\n### {coll}: median over every pass of every run\n"]
        out += [f"| variant | passes | {head} |", "| --- | ---: |" + " ---: |" * len(sizes)]
        for v in order:
            lst = runs.get((coll, v), [])
            if not lst:
                continue
            per = {b: [r["oop_time_us"] for _, rows in lst for r in rows if r["bytes"] == b] for b in sizes}
            cells = " | ".join(f"{statistics.median(per[b]):.1f}" if per[b] else "-" for b in sizes)
            out.append(f"| {v} | {len(per[sizes[0]])} | {cells} |")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logdir", type=Path)
    ap.add_argument("--order", required=True, help="variants, comma-separated, in table order")
    ap.add_argument("--medians", action="store_true", help="also the median over all passes per variant")
    a = ap.parse_args()
    print("\n".join(tables(load(a.logdir), a.order.split(","), a.medians)))


if __name__ == "__main__":
    main()
