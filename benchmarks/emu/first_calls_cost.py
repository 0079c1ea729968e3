"""What the loaded plugin costs the calling thread in a size's first calls of an nccl-tests loop (emulator).

The GPU observation this checks: on 2 x H200 with one process for both GPUs, reduce_scatter 4 MiB ran 0.93x
of plain NCCL with the plugin loaded and idle (table mode, no table) in nccl-tests' `-w 20 -n 40` loop, in
both passes, and 1.00x with 400 calls per average (benchmarks/results/h200x2/plugin-overhead). Here: 2 ranks
as threads of one emulator process (one host thread per rank, not one for both as nccl-tests -g 2 has), the
plugin's launch clock (`--launch-clock`), 104 calls of one collective and size (20 warm-up, 40 out of place,
44 in place and checks); per mode, the plugin's own host time per call of rank 0 (the emulator's
`plugin_ns`: every tuner and profiler call on the rank's thread) summed over the warm-up, out-of-place and
in-place windows, the median call and the slowest calls, each the median over --reps runs. CPU only.

    AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python python3 benchmarks/emu/first_calls_cost.py --reps 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from autoccl.emu import run, simple

WINDOWS = {"warm-up 0-19": (0, 20), "out of place 20-59": (20, 60), "in place 60-103": (60, 104)}
# mode -> (plugin loaded, settings)
MODES: dict[str, tuple[bool, dict[str, str]]] = {
    "plain": (False, {}),
    "idle": (True, {"AUTOCCL_MODE": "table"}),
    "idle-untimed": (True, {"AUTOCCL_MODE": "table", "AUTOCCL_MEASURE_CALLS": "0"}),
    "observe": (True, {"AUTOCCL_MODE": "observe"}),
}


def plugin_us_per_call(truth: Path, rank: int = 0) -> list[float]:
    calls = [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]
    mine = sorted(
        (c for c in calls if c.get("ev") == "call" and c.get("grank") == rank), key=lambda c: c["call"]
    )
    return [float(c.get("plugin_ns", 0)) / 1e3 for c in mine]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coll", default="reducescatter")
    ap.add_argument("--bytes", type=int, default=4 << 20)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    sc = simple({a.coll: [a.bytes]}, nranks=2, repeat=104, runahead=2)
    print(f"| mode | {' | '.join(WINDOWS)} | median call | slowest calls (call: µs) |")
    print("| --- |" + " ---: |" * len(WINDOWS) + " ---: | --- |")
    for mode, (loaded, env) in MODES.items():
        runs = []
        for _ in range(a.reps):
            with tempfile.TemporaryDirectory() as tmp:
                run(
                    sc,
                    plugin="default" if loaded else None,
                    env=env,
                    workdir=tmp,
                    extra_args=["--launch-clock"],
                    trace=False,
                )
                truth = next(Path(tmp).glob("truth*.jsonl"))
                runs.append(plugin_us_per_call(truth))
        n = min(len(r) for r in runs)
        per_call = [statistics.median(r[i] for r in runs) for i in range(n)]
        sums = [sum(per_call[lo : min(hi, n)]) for lo, hi in WINDOWS.values()]
        slow = sorted(range(n), key=lambda i: -per_call[i])[:4]
        cells = " | ".join(f"{s:.1f} µs" for s in sums)
        worst = ", ".join(f"{i}: {per_call[i]:.1f}" for i in slow)
        print(f"| {mode} | {cells} | {statistics.median(per_call):.2f} µs | {worst} |")


if __name__ == "__main__":
    main()
