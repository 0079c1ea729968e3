"""What a traced mode's calls ran, pass by pass and launch kind, from `bench nccl-tests --trace` traces:
rank 0's calls (the communicator's authority; every rank applies the same) counted by algorithm/protocol
pair, NCCL's own choice apart; the tasks that timed candidates (a search, or the verification of a table
entry), the pairs the table's records left out (`skipped_behind`) and those whose first probe moved to a
record's best point (`recorded_starts`).

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

from autoccl.bench.trace import read_records

_TRACE = re.compile(r"^p(\d+)_.+_(single|mpi)\.")


def count(trace_dir: Path) -> dict[tuple[int, str], dict[str, Any]]:
    """Per (pass, launch kind): calls, calls by pair ('nccl' where NCCL chose), tasks, tasks that timed
    candidates, pairs skipped, first probes moved to a record."""
    out: dict[tuple[int, str], dict[str, Any]] = defaultdict(
        lambda: {
            "calls": 0,
            "by_pair": Counter(),
            "tasks": 0,
            "sampled": 0,
            "skipped_behind": 0,
            "recorded_starts": None,
        }
    )
    files = sorted(trace_dir.glob("p*.jsonl"))
    if not files:
        raise SystemExit(f"{trace_dir}: no p<pass>_*.jsonl traces (run bench nccl-tests with --trace)")
    for f in files:
        m = _TRACE.match(f.name)
        if not m:
            continue
        row = out[(int(m.group(1)), m.group(2))]
        for rec in read_records([f]):  # a line cut short when the launch was killed is skipped
            if rec.get("rank") != 0:
                continue
            if rec.get("ev") == "call":
                row["calls"] += 1
                algo, proto = rec.get("algo"), rec.get("proto")
                row["by_pair"]["nccl" if not algo else f"{algo}/{proto}"] += 1
            elif rec.get("ev") == "task":
                row["tasks"] += 1
                row["sampled"] += int(rec.get("search_samples", 0) > 0)
                row["skipped_behind"] += int(rec.get("skipped_behind", 0))
                if "recorded_starts" in rec:  # traces of engines before the field have none: unknown, not 0
                    row["recorded_starts"] = int(row["recorded_starts"] or 0) + int(rec["recorded_starts"])
    return dict(sorted(out.items()))


def markdown(rows: dict[tuple[int, str], dict[str, Any]]) -> str:
    pairs = sorted({p for r in rows.values() for p in r["by_pair"] if p != "nccl"})
    head = ["pass", "launch", "calls", "NCCL's choice", *pairs, "tasks timing candidates"]
    head += ["pairs skipped (records)", "first probes from records"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---:" for _ in head) + " |"]
    for (p, launch), r in rows.items():
        cells = [
            str(p),
            launch,
            str(r["calls"]),
            str(r["by_pair"]["nccl"]),
            *(str(r["by_pair"][x]) for x in pairs),
        ]
        starts = "—" if r["recorded_starts"] is None else str(r["recorded_starts"])
        cells += [f"{r['sampled']} of {r['tasks']}", str(r["skipped_behind"]), starts]
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
        out = {f"p{p} {launch}": {**r, "by_pair": dict(r["by_pair"])} for (p, launch), r in rows.items()}
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
