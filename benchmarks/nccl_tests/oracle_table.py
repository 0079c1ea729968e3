#!/usr/bin/env python3
"""Per-cell oracle from sweep JSONL: the best configuration per (collective, size) against NCCL's default.

python3 benchmarks/nccl_tests/oracle_table.py <env_oracle.jsonl> <plain.jsonl> [--json out.json] > table.md
"""

from __future__ import annotations

import argparse
import json
import math
from collections import defaultdict


def load(path: str) -> list[dict]:
    with open(path) as f:
        return [r for r in map(json.loads, f) if not r.get("summary")]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("oracle")
    ap.add_argument("plain")
    ap.add_argument("--launch", default="single")
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    default: dict[tuple[str, int], float] = {}
    cells: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for r in load(a.plain):
        if r["launch"] == a.launch:
            default[(r["coll"], r["bytes"])] = r["busbw_gbs"]
            # NCCL's own choice is a candidate too: the oracle is never below the default.
            cells[(r["coll"], r["bytes"])].append({**r, "algo": "nccl", "proto": "default", "channels": 0})
    for r in load(a.oracle):
        cells[(r["coll"], r["bytes"])].append(r)
    out = []
    print("| collective | size | NCCL default busbw (GB/s) | oracle busbw | oracle config | speedup |")
    print("| --- | ---: | ---: | ---: | --- | ---: |")
    for (coll, size), rows in sorted(cells.items()):
        best = max(rows, key=lambda r: r["busbw_gbs"])
        base = default.get((coll, size))
        sp = best["busbw_gbs"] / base if base else math.nan
        cfg = f"{best['algo']}/{best['proto']}/{best['channels'] or 'default'}"
        print(f"| {coll} | {size >> 20} MiB | {base or 0:.1f} | {best['busbw_gbs']:.1f} | {cfg} | {sp:.3f} |")
        out.append(
            {
                "coll": coll,
                "bytes": size,
                "nccl_busbw_gbs": base,
                "oracle_busbw_gbs": best["busbw_gbs"],
                "algo": best["algo"],
                "proto": best["proto"],
                "channels": best["channels"],
                "speedup": sp,
            }
        )
    # the target cells: AG/RS/AR x 4/16/64/256/1024 MiB
    target = [
        o["speedup"]
        for o in out
        if o["coll"] in ("allgather", "reducescatter", "allreduce")
        and o["bytes"] in (4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30)
        and not math.isnan(o["speedup"])
    ]
    if target:
        gm = math.exp(sum(math.log(x) for x in target) / len(target))
        n = len(target)
        print(f"\ntarget cells ({n}): geometric mean oracle/default = {gm:.3f}, min = {min(target):.3f}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
