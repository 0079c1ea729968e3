"""One demo run's 256 MiB tasks: each configuration rank 0 ran, with the medians of its true kernel times and
of the model's time (the emulator's truth), and the search's duel lines (AUTOCCL_SEARCH_DEBUG=1). Usage:
    AUTOCCL_SEARCH_DEBUG=1 AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python \
        python3 -m autoccl.cli demo -o /tmp/dd
    python3 benchmarks/emu/demo_seed_truth.py /tmp/dd
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path


def main(out: Path) -> None:
    res = json.loads((out / "results.json").read_text())
    big = {
        f"{t['coll']} {t['bytes'] >> 20} MiB": round(100 * t["gain"], 1)
        for t in res["tasks"]
        if t["bytes"] == 256 << 20
    }
    print("gains (%):", big)
    rows = [
        json.loads(line)
        for f in (out / "emu-online").glob("truth*.jsonl")
        for line in f.read_text().splitlines()
    ]
    for coll in ("reducescatter", "allgather"):
        true_us: dict[tuple[str, str, int, int], list[float]] = defaultdict(list)
        model_us: dict[tuple[str, str, int, int], list[float]] = defaultdict(list)
        for r in rows:
            if r.get("coll") == coll and r["bytes"] == 256 << 20 and r["rank"] == 0:
                key = (r["algo"], r["proto"], r["used_channels"], r["chunk"])
                true_us[key].append(r["dur_ns"] / 1000)
                model_us[key].append(r["model_us"])
        print(coll)
        for key in sorted(true_us, key=lambda k: statistics.median(true_us[k])):
            if len(true_us[key]) >= 3:
                print(
                    f"   {key} calls {len(true_us[key])} true median {statistics.median(true_us[key]):.1f}"
                    f" model {statistics.median(model_us[key]):.1f}"
                )
    for f in (out / "emu-online").glob("stderr*"):
        for line in f.read_text().splitlines():
            if "duel at" in line:
                print(line)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
