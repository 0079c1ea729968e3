#!/usr/bin/env python3
"""One mode against another, pooled over several `bench nccl-tests` result folders: a difference of a few per
cent that no single run can tell from launch-to-launch noise may still show when every run leans the same way.

Each folder's summary.json holds, per cell and pass, a mode's busbw over plain NCCL's of the same pass;
the ratio of two modes in the same pass (plain's busbw cancels) is the comparison. Per folder: the geomean
over its cells and passes; pooled: the geomean over all of them, a 95 % interval from resampling whole
folders (cells of one launch move together, so folders, not cells, are the independent units) and how many
folders lean each way with the exact two-sided sign-test p. With --untimed-only, only the cells whose task
the folder's tasks.md says converged at call 0 in that pass (served from the table, nothing timed).

Read the p and the interval as optimistic: a percentile bootstrap over ten-odd folders undercovers, and
folders measured back to back on one machine need not be independent. A pass whose plain launch is missing
has no ratios, so its cells drop out for both modes. Pass every folder that holds both modes: the tool pools
only what it is given.

    R=benchmarks/results/h200x1
    python3 benchmarks/nccl_tests/pool_modes.py --mode online --against idle --passes warm \
        $R/nccl-tests-1m-1g-hosts/1-64m $R/overhead-and-table-hosts
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autoccl.sizes import parse_size


class FolderResult:
    def __init__(self, folder: str, logs: list[float]) -> None:
        self.folder = folder
        self.logs = logs  # log(mode / against) per cell and pass

    @property
    def geomean(self) -> float:
        return math.exp(sum(self.logs) / len(self.logs))


def untimed_cells(tasks_md: Path, mode: str) -> set[tuple[str, str, int]]:
    """(pass, collective, bytes) of `mode`'s tasks that converged at call 0 (from the table, untimed)."""
    header: list[str] | None = None
    out: set[tuple[str, str, int]] = set()
    for line in tasks_md.read_text().splitlines():
        if not line.startswith("|"):
            continue
        cols = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cols
            continue
        if set("".join(cols)) <= set("-: "):
            continue
        row = dict(zip(header, cols, strict=False))  # a short row: the columns it has
        if row.get("mode") == mode and row.get("converged at call") == "0":
            # the size as tasks.md writes it ("4 MiB")
            out.add((row["pass"], row["collective"], int(parse_size(row["size"]))))
    return out


def folder_result(
    folder: Path, mode: str, against: str, min_bytes: int, passes: str, untimed_only: bool
) -> FolderResult | None:
    summary = json.loads((folder / "summary.json").read_text())
    keep: set[tuple[str, str, int]] | None = None
    if untimed_only:
        tasks = folder / "tasks.md"
        if not tasks.is_file():
            return None  # not traced: which tasks ran untimed is unknown
        keep = untimed_cells(tasks, mode)
    logs: list[float] = []
    for cell in summary.get("cells", []):
        modes = cell.get("modes", {})
        if mode not in modes or against not in modes or int(cell["bytes"]) < min_bytes:
            continue
        a, b = modes[mode].get("ratio_by_pass", {}), modes[against].get("ratio_by_pass", {})
        for p, ra in a.items():
            rb = b.get(p)
            if not ra or not rb or (passes == "warm" and p == "0") or (passes == "cold" and p != "0"):
                continue
            if keep is not None and (p, cell["coll"], int(cell["bytes"])) not in keep:
                continue
            logs.append(math.log(float(ra) / float(rb)))
    return FolderResult(str(folder), logs) if logs else None


def sign_test_p(below: int, above: int) -> float:
    """Exact two-sided binomial p of `below` of `below + above` folders on one side, at 1/2."""
    n = below + above
    k = min(below, above)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def pooled(results: Sequence[FolderResult], resamples: int, seed: int) -> dict[str, float]:
    """Geomean over every cell and pass, and its 95 % interval from resampling folders with replacement."""
    all_logs = [v for r in results for v in r.logs]
    rng = np.random.default_rng(seed)
    sums = np.array([sum(r.logs) for r in results])
    counts = np.array([len(r.logs) for r in results])
    picks = rng.integers(0, len(results), size=(resamples, len(results)))
    boot = np.exp(sums[picks].sum(axis=1) / counts[picks].sum(axis=1))
    return {
        "geomean": math.exp(sum(all_logs) / len(all_logs)),
        "ci_low": float(np.percentile(boot, 2.5)),
        "ci_high": float(np.percentile(boot, 97.5)),
        "cells": float(len(all_logs)),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folders", nargs="+", type=Path, help="bench nccl-tests result folders (summary.json)")
    ap.add_argument("--mode", required=True, help="the mode compared (e.g. online)")
    ap.add_argument("--against", required=True, help="the mode it is compared with (e.g. idle)")
    ap.add_argument("--min-bytes", default="4M", help="smallest cell counted (default 4M, the bars' range)")
    ap.add_argument(
        "--passes", choices=("warm", "cold", "all"), default="warm", help="warm: the passes after the first"
    )
    ap.add_argument("--untimed-only", action="store_true", help="only cells whose task converged at call 0")
    ap.add_argument("--resamples", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    min_bytes = int(parse_size(args.min_bytes))
    results, left_out = [], []
    # sorted: the resampling draws by position, so the same folders give the same interval in any order
    for f in sorted(set(args.folders)):
        if not (f / "summary.json").is_file():
            raise SystemExit(f"{f}: no summary.json")
        r = folder_result(f, args.mode, args.against, min_bytes, args.passes, args.untimed_only)
        if r is None:
            left_out.append(str(f))
        else:
            results.append(r)
    if left_out:  # one line: a long list of folders without both modes would hide the table
        why = " whose task tasks.md says converged at call 0" if args.untimed_only else ""
        print(
            f"left out, no cell with both {args.mode} and {args.against} ({args.passes} passes){why}: "
            f"{len(left_out)} folders ({', '.join(left_out)})\n"
        )
    if not results:
        raise SystemExit("no folder has cells to compare")
    print(f"| folder | cells × passes | {args.mode} / {args.against} (geomean) |")
    print("| --- | ---: | ---: |")
    for r in results:
        print(f"| {r.folder} | {len(r.logs)} | {r.geomean:.3f} |")
    below = sum(r.geomean < 1 for r in results)
    above = sum(r.geomean > 1 for r in results)
    if len(results) < 2:
        print(f"\none folder: {results[0].geomean:.3f}× over {len(results[0].logs)} cells; nothing to pool")
        return 0
    p = pooled(results, args.resamples, args.seed)
    # the geomean and its interval weigh each folder by its cells; the sign test gives each folder one vote
    print(
        f"\npooled over {len(results)} folders, {int(p['cells'])} cells × passes: "
        f"{args.mode} / {args.against} {p['geomean']:.3f}× over all cells "
        f"(95 % CI, folders resampled: {p['ci_low']:.3f}–{p['ci_high']:.3f}); "
        f"folders, one vote each: {below} below 1, {above} above "
        f"(sign test p = {sign_test_p(below, above):.3f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
