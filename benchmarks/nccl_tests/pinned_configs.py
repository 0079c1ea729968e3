#!/usr/bin/env python3
"""Where each task of each online run ended: the authority's (rank 0) task records in kept traces.

    python3 benchmarks/nccl_tests/pinned_configs.py /tmp/traces      # one sub-folder per variant
Prints one markdown table per sub-folder: collective, bytes, configuration applied last, converged at call,
NCCL's default and the pinned configuration's median (the search's objective), gain.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def rows_of(folder: Path) -> list[dict[str, object]]:
    out = []
    for f in sorted(folder.glob("*.jsonl")):
        for line in f.read_text(errors="replace").splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("ev") == "task" and r.get("rank") == 0:
                out.append(r)
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/traces")
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        rows = rows_of(folder)
        print(f"## {folder.name} ({len(rows)} tasks)\n")
        print("| collective | bytes | applied last | converged at | default us | pinned us | gain |")
        print("| --- | ---: | --- | ---: | ---: | ---: | ---: |")
        for r in sorted(rows, key=lambda r: (str(r["coll"]), int(str(r["bytes"])))):
            cfg = "nccl" if r.get("algo") is None else f"{r['algo']}/{r['proto']}"
            if r.get("channels"):
                cfg += f"/{r['channels']}"
            if r.get("chunk_halvings"):
                cfg += f"/chunk=nccl/{2 ** int(str(r['chunk_halvings']))}"
            gain = r.get("gain")
            g = "-" if gain is None else f"{100 * float(str(gain)):+.1f}%"
            dflt, best = float(str(r.get("default_us", 0))), float(str(r.get("best_us", 0)))
            conv = r.get("converged_at")
            print(f"| {r['coll']} | {r['bytes']} | {cfg} | {conv} | {dflt:.1f} | {best:.1f} | {g} |")
        print()


if __name__ == "__main__":
    main()
