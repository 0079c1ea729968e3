"""What a traced mode's calls ran, pass by pass, from `bench nccl-tests --trace` traces: rank 0's calls (the
communicator's authority; every rank applies the same) counted by algorithm/protocol pair, NCCL's own choice
apart, and per pass the tasks that searched and the pairs the table's records left out (`skipped_behind`).

It shows whether a warm start still probes pairs the earlier jobs measured far behind NCCL's choice (ring/LL
at 3.7x over sockets): with the table's pair records those calls should be gone from every pass after the
first.

    python3 benchmarks/nccl_tests/calls_by_pair.py <bench out>/traces/online [--markdown]
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

_PASS = re.compile(r"^p(\d+)_")


def count(trace_dir: Path) -> dict[int, dict[str, Any]]:
    """Per pass: calls, calls by pair ('nccl' where NCCL chose), tasks, tasks that searched, pairs skipped."""
    out: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"calls": 0, "by_pair": Counter(), "tasks": 0, "searched": 0, "skipped_behind": 0}
    )
    files = sorted(trace_dir.glob("p*.jsonl"))
    if not files:
        raise SystemExit(f"{trace_dir}: no p<pass>_*.jsonl traces (run bench nccl-tests with --trace)")
    for f in files:
        m = _PASS.match(f.name)
        if not m:
            continue
        row = out[int(m.group(1))]
        for line in f.read_text().splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short when the launch was killed
            if rec.get("rank") != 0:
                continue
            if rec.get("ev") == "call":
                row["calls"] += 1
                algo, proto = rec.get("algo"), rec.get("proto")
                row["by_pair"]["nccl" if not algo else f"{algo}/{proto}"] += 1
            elif rec.get("ev") == "task":
                row["tasks"] += 1
                row["searched"] += int(rec.get("search_samples", 0) > 0)
                row["skipped_behind"] += int(rec.get("skipped_behind", 0))
    return dict(sorted(out.items()))


def markdown(rows: dict[int, dict[str, Any]]) -> str:
    pairs = sorted({p for r in rows.values() for p in r["by_pair"] if p != "nccl"})
    head = ["pass", "calls", "NCCL's choice", *pairs, "tasks searched", "pairs skipped (records)"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---:" for _ in head) + " |"]
    for p, r in rows.items():
        cells = [str(p), str(r["calls"]), str(r["by_pair"]["nccl"]), *(str(r["by_pair"][x]) for x in pairs)]
        cells += [f"{r['searched']} of {r['tasks']}", str(r["skipped_behind"])]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("trace_dir", type=Path, help="<bench out>/traces/<mode>")
    ap.add_argument("--markdown", action="store_true", help="a markdown table instead of JSON")
    args = ap.parse_args()
    rows = count(args.trace_dir)
    if args.markdown:
        print(markdown(rows))
    else:
        print(json.dumps({str(p): {**r, "by_pair": dict(r["by_pair"])} for p, r in rows.items()}, indent=1))


if __name__ == "__main__":
    main()
