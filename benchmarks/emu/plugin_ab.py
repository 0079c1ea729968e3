"""Two builds of the plugin side by side on an nccl-tests-shaped job in the emulator (CPU only).

What it answers: does a change to the tuner change what nccl-tests' loops run, or what the plugin costs the
calling thread, where no GPU could be had to say so. Each collective (all_gather, reduce_scatter,
all_reduce) at each size runs nccl-tests' 104 calls (20 warm-up, 40 out of place, 44 in place), 2 ranks;
modes plain (no plugin), online (cold, the default `autoccl run`), idle (table mode, no table) and
observe. Runs alternate A, B, A, B ... per mode. Per mode and build:

- the configurations rank 0 ran, call by call: whether B's runs match A's, and whether each build's own runs
  match each other (the emulator's event order is seeded, the plugin's threads are not);
- each cell's loop time on the emulated GPU (rank 0's last call's end minus its first call's start), as B / A,
  geometric mean and worst cell over the runs' medians; and against plain; beside it, A against itself:
  per cell, its slowest run over its fastest (the worst cell), the spread a B / A ratio must leave to mean
  anything;
- the plugin's host time per call on rank 0's thread (the emulator's `plugin_ns`): the median call of each
  run, the median over runs and the runs' range.

The emulated GPU times are the emulator's model, not a GPU: a speed claim needs interleaved GPU launches.

    PYTHONPATH=python python3 benchmarks/emu/plugin_ab.py --a OLD/lib --b NEW/lib --reps 3 --out DIR
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path
from typing import Any

from autoccl.emu import run, simple

COLLS = ("allgather", "reducescatter", "allreduce")
CALLS = 104
MODES: dict[str, dict[str, str] | None] = {
    "plain": None,
    "online": {"AUTOCCL_MODE": "online"},
    "idle": {"AUTOCCL_MODE": "table"},
    "observe": {"AUTOCCL_MODE": "observe"},
}


def one_run(plugin: Path | None, env: dict[str, str] | None, sizes: list[int], seed: int) -> dict[str, Any]:
    """One launch: rank 0's configurations and loop time per cell, its plugin time per call."""
    sc = simple({c: sizes for c in COLLS}, nranks=2, repeat=CALLS, runahead=2, seed=seed)
    with tempfile.TemporaryDirectory() as tmp:
        settings = dict(env or {}, AUTOCCL_CACHE_DIR=str(Path(tmp) / "cache"))
        res = run(
            sc,
            plugin=str(plugin) if plugin else None,
            env=settings,
            workdir=tmp,
            extra_args=["--launch-clock"],
            trace=False,
        )
    mine = sorted((c for c in res.calls if int(c["grank"]) == 0), key=lambda c: int(c["seq"]))
    cells: dict[str, dict[str, Any]] = {}
    for c in mine:
        cell = cells.setdefault(f"{c['coll']} {int(c['bytes']) >> 20} MiB", {"configs": [], "start": None})
        cell["configs"].append((c["algo"], c["proto"], c["channels"], c["chunk"]))
        cell["start"] = int(c["start_ns"]) if cell["start"] is None else cell["start"]
        cell["stop"] = int(c["stop_ns"])
    return {
        "configs": {k: v["configs"] for k, v in cells.items()},
        "loop_us": {k: (v["stop"] - v["start"]) / 1e3 for k, v in cells.items()},
        "plugin_us_per_call": statistics.median(int(c.get("plugin_ns", 0)) / 1e3 for c in mine),
    }


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="build A's lib directory (libautoccl-nccl.so)")
    ap.add_argument("--b", type=Path, required=True, help="build B's lib directory")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--sizes", default="1,4,16,64,256,1024", help="MiB, comma-separated")
    ap.add_argument("--out", type=Path, required=True, help="directory for summary.json and summary.md")
    a = ap.parse_args()
    sizes = [int(s) << 20 for s in a.sizes.split(",")]
    libs = {"A": a.a / "libautoccl-nccl.so", "B": a.b / "libautoccl-nccl.so"}
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {m: {"A": [], "B": []} for m in MODES}
    for rep in range(a.reps):
        for mode, env in MODES.items():
            for build in ("A", "B"):  # interleaved: A, B, A, B ...
                plugin = libs[build] if env is not None else None
                runs[mode][build].append(one_run(plugin, env, sizes, seed=1 + rep))
                print(f"rep {rep + 1}/{a.reps} {mode} {build}", flush=True)
    summary: dict[str, Any] = {"sizes_mib": a.sizes, "reps": a.reps, "calls_per_cell": CALLS, "modes": {}}
    plain_med = {
        k: statistics.median(r["loop_us"][k] for r in runs["plain"]["A"])
        for k in runs["plain"]["A"][0]["loop_us"]
    }
    lines = [
        "| mode | configurations B = A (runs) | A's runs alike | B's runs alike "
        "| loop time B / A: geomean, worst cell | A's runs: slowest / fastest, worst cell "
        "| A / plain: geomean, worst | B / plain: geomean, worst | plugin µs per call A, B (runs' range) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for mode in MODES:
        ra, rb = runs[mode]["A"], runs[mode]["B"]
        same = sum(x["configs"] == y["configs"] for x, y in zip(ra, rb, strict=True))
        alike_a = all(r["configs"] == ra[0]["configs"] for r in ra)
        alike_b = all(r["configs"] == rb[0]["configs"] for r in rb)
        cells = list(ra[0]["loop_us"])
        med_a = {k: statistics.median(r["loop_us"][k] for r in ra) for k in cells}
        med_b = {k: statistics.median(r["loop_us"][k] for r in rb) for k in cells}
        ratio = {k: med_b[k] / med_a[k] for k in cells}
        vs_plain_a = {k: plain_med[k] / med_a[k] for k in cells}  # > 1: faster than plain
        vs_plain_b = {k: plain_med[k] / med_b[k] for k in cells}
        worst = max(cells, key=lambda k: ratio[k])
        wa = min(cells, key=lambda k: vs_plain_a[k])
        wb = min(cells, key=lambda k: vs_plain_b[k])
        spread_a = {k: max(r["loop_us"][k] for r in ra) / min(r["loop_us"][k] for r in ra) for k in cells}
        ws = max(cells, key=lambda k: spread_a[k])
        per_a = [r["plugin_us_per_call"] for r in ra]
        per_b = [r["plugin_us_per_call"] for r in rb]
        pa, pb = statistics.median(per_a), statistics.median(per_b)
        summary["modes"][mode] = {
            "configs_identical_runs": same,
            "a_runs_alike": alike_a,
            "b_runs_alike": alike_b,
            "loop_time_b_over_a": ratio,
            "a_slowest_over_fastest_run": spread_a,
            "plain_over_a": vs_plain_a,
            "plain_over_b": vs_plain_b,
            "plugin_us_per_call": {"A": per_a, "B": per_b},
        }
        lines.append(
            f"| {mode} | {same} of {len(ra)} | {alike_a} | {alike_b} "
            f"| {geomean(list(ratio.values())):.4f}, {worst} {ratio[worst]:.4f} "
            f"| {ws} {spread_a[ws]:.4f} "
            f"| {geomean(list(vs_plain_a.values())):.3f}×, {wa} {vs_plain_a[wa]:.3f}× "
            f"| {geomean(list(vs_plain_b.values())):.3f}×, {wb} {vs_plain_b[wb]:.3f}× "
            f"| {pa:.2f} ({min(per_a):.2f}–{max(per_a):.2f}), {pb:.2f} ({min(per_b):.2f}–{max(per_b):.2f}) |"
        )
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (a.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
