"""Table of gpu_small_cells.sh's runs: per launch kind, collective and size, the out-of-place time (µs)
of the last nccl-tests pass, median over repetitions, for each variant, and its ratio to plain NCCL
(time ratio plain / variant: > 1 = faster than plain, the busbw ratio).

Usage: python3 benchmarks/nccl_tests/small_cells.py DIR   (DIR holds logs/<launch>-<coll>-<variant>-<rep>.txt)
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import parse_rows

VARIANTS = [
    "plain",
    "ctasN",
    "ctas64",
    "idle",
    "idleN",
    "idle32cap",
    "idle64",
    "idle64cap",
    "online",
    "online64",
    "online64cap",
    "table64cap",
]


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    logs = Path(sys.argv[1]) / "logs"
    times: dict[tuple[str, str, int, str], list[float]] = defaultdict(list)
    bad: list[str] = []
    for f in sorted(logs.glob("*.txt")):
        launch, rest = f.stem.split("-", 1)
        coll, variant, _rep = rest.rsplit("-", 2)
        rows = parse_rows(f.read_text(errors="replace"))
        if not rows:
            bad.append(f"{f.name}: no result rows")
            continue
        if any((r["oop_wrong"] or 0) or (r["ip_wrong"] or 0) for r in rows):
            bad.append(f"{f.name}: data errors")
        last = max(int(r["cycle"]) for r in rows)  # type: ignore[call-overload]
        for r in rows:
            if r["cycle"] == last:
                times[(launch, coll, int(r["bytes"]), variant)].append(float(r["oop_time_us"]))  # type: ignore[arg-type]
    cells = sorted({k[:3] for k in times})
    variants = [v for v in VARIANTS if any(k[3] == v for k in times)]
    print("| launch | collective | size | " + " | ".join(variants) + " |")
    print("| --- | --- | ---: |" + " ---: |" * len(variants))
    for launch, coll, nbytes in cells:
        base = times.get((launch, coll, nbytes, "plain"))
        b = statistics.median(base) if base else None
        out = []
        for v in variants:
            t = times.get((launch, coll, nbytes, v))
            if not t:
                out.append("-")
                continue
            m = statistics.median(t)
            out.append(f"{m:.1f}" + (f" ({b / m:.2f}×)" if b and v != "plain" else ""))
        print(f"| {launch} | {coll} | {nbytes >> 20} MiB | " + " | ".join(out) + " |")
    print("\ntime µs (plain / variant); last pass of -N 3, median over repetitions")
    print("\nEvery repetition (µs, in run order):\n")
    for launch, coll, nbytes in cells:
        reps = "; ".join(
            f"{v} " + " ".join(f"{t:.1f}" for t in times[(launch, coll, nbytes, v)])
            for v in variants
            if (launch, coll, nbytes, v) in times
        )
        print(f"- {launch} {coll} {nbytes >> 20} MiB: {reps}")
    for line in bad:
        print("WARNING", line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
