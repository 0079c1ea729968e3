"""What the loaded plugin costs the calling thread in a size's first calls of an nccl-tests loop (emulator).

The GPU observation this checks: on 2 x H200 with one process for both GPUs, reduce_scatter 4 MiB ran 0.93x
of plain NCCL with the plugin loaded and idle (table mode, no table) in nccl-tests' `-w 20 -n 40` loop, in
both passes, and 1.00x with 400 calls per average (benchmarks/results/h200x2/plugin-overhead). Here: 2 ranks
as threads of one emulator process (one host thread per rank, not one for both as nccl-tests -g 2 has), the
plugin's launch clock (`--launch-clock`), 104 calls of one collective and size (20 warm-up, 40 out of place,
44 in place and checks); per mode, the plugin's own host time per call of rank 0 (the emulator's
`plugin_ns`: every tuner and profiler call on the rank's thread) summed over the warm-up, out-of-place and
in-place windows, the median call and the slowest calls, each the median over --reps runs. CPU only.
The modes are those of the GPU overhead plans (benchmarks/gpu/bench.sh `overhead`, `promise`): plain, the
plugin loaded and idle (timing a task's first calls, or none), observe, and online started from the table a
cold run of the same job wrote into the mode's own cache (online-warm: the converged online of the GPU plans).
The last column is the most configurations one measured run of the mode ran (1: settled throughout;
online-warm reads more where the cold run ended without a table entry). CI runs this
(tests/emu/test_first_calls_cost.py, one run a mode) so that it keeps working; its numbers are read here, not
asserted.

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
# mode -> (plugin loaded, settings, unmeasured runs first into the mode's own cache)
MODES: dict[str, tuple[bool, dict[str, str], int]] = {
    "plain": (False, {}, 0),
    "idle": (True, {"AUTOCCL_MODE": "table"}, 0),
    "idle-untimed": (True, {"AUTOCCL_MODE": "table", "AUTOCCL_MEASURE_CALLS": "0"}, 0),
    "observe": (True, {"AUTOCCL_MODE": "observe"}, 0),
    "online-warm": (True, {"AUTOCCL_MODE": "online"}, 1),
}


def plugin_us_per_call(truth: Path, rank: int = 0) -> tuple[list[float], int]:
    """The rank's plugin time per call (us), and how many configurations its calls ran (1: settled, e.g. from
    the table, or left to NCCL throughout)."""
    calls = [json.loads(line) for line in truth.read_text().splitlines() if line.strip()]
    mine = sorted(
        (c for c in calls if c.get("ev") == "call" and c.get("grank") == rank), key=lambda c: c["call"]
    )
    configs = {(c.get("algo"), c.get("proto"), c.get("channels")) for c in mine}
    return [float(c.get("plugin_ns", 0)) / 1e3 for c in mine], len(configs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coll", default="reducescatter")
    ap.add_argument("--bytes", type=int, default=4 << 20)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    sc = simple({a.coll: [a.bytes]}, nranks=2, repeat=104, runahead=2)
    print(f"| mode | {' | '.join(WINDOWS)} | median call | slowest calls (call: µs) | configurations run |")
    print("| --- |" + " ---: |" * len(WINDOWS) + " ---: | --- | ---: |")
    for mode, (loaded, env, cold_runs) in MODES.items():
        runs, configs = [], 0
        with tempfile.TemporaryDirectory() as cache:
            settings = {**env, "AUTOCCL_CACHE_DIR": cache}
            for k in range(cold_runs + a.reps):
                with tempfile.TemporaryDirectory() as tmp:
                    run(
                        sc,
                        plugin="default" if loaded else None,
                        env=settings,
                        workdir=tmp,
                        extra_args=["--launch-clock"],
                        trace=False,
                    )
                    if k >= cold_runs:
                        truth = next(Path(tmp).glob("truth*.jsonl"))
                        per_call, n_configs = plugin_us_per_call(truth)
                        runs.append(per_call)
                        configs = max(configs, n_configs)
        n = min(len(r) for r in runs)
        per_call = [statistics.median(r[i] for r in runs) for i in range(n)]
        sums = [sum(per_call[lo : min(hi, n)]) for lo, hi in WINDOWS.values()]
        slow = sorted(range(n), key=lambda i: -per_call[i])[:4]
        cells = " | ".join(f"{s:.1f} µs" for s in sums)
        worst = ", ".join(f"{i}: {per_call[i]:.1f}" for i in slow)
        print(f"| {mode} | {cells} | {statistics.median(per_call):.2f} µs | {worst} | {configs} |")


if __name__ == "__main__":
    main()
