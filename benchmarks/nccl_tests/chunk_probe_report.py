#!/usr/bin/env python3
"""Tables of a chunk probe (benchmarks/nccl_tests/gpu_nccl_v6_check.sh): one nccl-tests log per
(collective, configuration) named `<coll>__<tag>.log`; busbw (GB/s, mean of out-of-place and in-place) per
size, each configuration against plain NCCL, and the data-check errors (nccl-tests -c 1) summed.

Usage: chunk_probe_report.py DIR
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep import parse_rows


def busbw_by_size(text: str) -> tuple[dict[int, float], int]:
    """Mean busbw per size over the log's rows, and the data errors it reports."""
    sums: dict[int, list[float]] = defaultdict(list)
    wrong = 0
    for r in parse_rows(text):
        size, oop, ip = r["bytes"], r["oop_busbw_gbs"], r["ip_busbw_gbs"]
        assert isinstance(size, int) and isinstance(oop, float) and isinstance(ip, float)
        sums[size].append((oop + ip) / 2)
        wrong += sum(w for w in (r["oop_wrong"], r["ip_wrong"]) if isinstance(w, int))
    return {b: sum(v) / len(v) for b, v in sums.items()}, wrong


def human(n: int) -> str:
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size and n % size == 0:
            return f"{n // size}{unit}"
    return str(n)


def report(directory: Path) -> str:
    runs: dict[str, dict[str, tuple[dict[int, float], int]]] = defaultdict(dict)
    for log in sorted(directory.glob("*__*.log")):
        coll, tag = log.stem.split("__", 1)
        runs[coll][tag] = busbw_by_size(log.read_text(errors="replace"))
    out = []
    for coll, tags in runs.items():
        sizes = sorted({b for bw, _ in tags.values() for b in bw})
        plain = tags.get("plain", ({}, 0))[0]
        out.append(f"## {coll}: busbw GB/s (x plain NCCL)\n")
        out.append("| configuration | " + " | ".join(human(s) for s in sizes) + " | data errors |")
        out.append("| --- |" + " ---: |" * (len(sizes) + 1))
        for tag, (bw, wrong) in tags.items():
            cells = []
            for s in sizes:
                if s not in bw:
                    cells.append("—")
                elif tag != "plain" and plain.get(s):
                    cells.append(f"{bw[s]:.1f} ({bw[s] / plain[s]:.3f})")
                else:
                    cells.append(f"{bw[s]:.1f}")
            out.append(f"| {tag} | " + " | ".join(cells) + f" | {wrong} |")
        out.append("")
    return "\n".join(out) if out else "no probe logs\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    print(report(ap.parse_args().dir))


if __name__ == "__main__":
    main()
