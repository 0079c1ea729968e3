"""How far a rank asks the authority ahead (AUTOCCL_ASK_AHEAD: 0, a fixed count, or auto) in the emulator's
four-process job: the other ranks' lookup waits against what the searches spent and found, over scenario
seeds. The job is tests/emu/test_online.py::test_online_processes_tcp_converge's (scenario(300), bounded,
host 0 delayed 200 us, decisions over TCP), with the emulator's noise on unless --no-noise.

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/ask_ahead_seeds.py \
    --seeds 5-13 > benchmarks/results/cpu/ask-ahead/seeds-noise.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from seed_range import seeds
from test_online import Host, bounded, online_env, run, scenario


def one(plugin: Path, seed: int, noise: bool, ask: str) -> dict[str, Any]:
    sc = replace(bounded(scenario(300, seed=seed, noise=noise)), hosts={0: Host(delay_us=200)})
    res = run(sc, plugin=plugin, env=online_env(True, AUTOCCL_ASK_AHEAD=ask), processes=True, timeout=300)
    tasks = [t for t in res.trace if t.get("ev") == "task" and t.get("source") == "online"]
    others = [t for t in tasks if int(t.get("rank", 0)) != 0]
    authority = [t for t in tasks if int(t.get("rank", 0)) == 0]
    gains = {f"{t.get('coll')} {int(t.get('bytes') or 0) >> 10} KiB": t.get("gain") for t in authority}
    return {
        "wait_ms": sum(float(t.get("lookup_us") or 0.0) for t in others) / 1000.0,
        "waited": sum(int(t.get("lookups_asked") or 0) for t in others),
        "regret_us": sum(float(t.get("regret_us") or 0.0) for t in authority),
        "converged_at": [t.get("converged_at") for t in authority],
        "big_converged_at": next(
            (
                t.get("converged_at")
                for t in authority
                if t.get("coll") == "allreduce" and int(t.get("bytes") or 0) == 64 << 20
            ),
            None,
        ),
        "ahead_max": max((int(t.get("ask_ahead_max") or 0) for t in others), default=0),
        "gains": gains,
    }


def mean_or_dash(values: list[Any]) -> str:
    """The mean of the values that are numbers (a task that never converged has none), else a dash."""
    nums = [float(v) for v in values if isinstance(v, int | float)]
    return f"{statistics.fmean(nums):.0f}" if nums else "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=seeds, default=seeds("5-13"))
    ap.add_argument("--asks", default="0,16,auto", help="AUTOCCL_ASK_AHEAD values, comma-separated")
    ap.add_argument("--no-noise", action="store_true")
    a = ap.parse_args()
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    asks = a.asks.split(",")
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in asks}
    print(
        "| seed | AUTOCCL_ASK_AHEAD | others' lookup waits ms | waited lookups | furthest asked | regret us "
        "| gains |"
    )
    print("| ---: | --- | ---: | ---: | ---: | ---: | --- |")
    for seed in a.seeds:
        for ask in asks:  # interleaved per seed: a machine's drift lands on every setting alike
            r = one(plugin, seed, not a.no_noise, ask)
            rows[ask].append(r)
            g = ", ".join(
                f"{k} {v:.3f}" if isinstance(v, float) else f"{k} -" for k, v in sorted(r["gains"].items())
            )
            print(
                f"| {seed} | {ask} | {r['wait_ms']:.1f} | {r['waited']} | {r['ahead_max']} "
                f"| {r['regret_us']:.0f} | {g} |",
                flush=True,
            )
    print()
    print(
        "| AUTOCCL_ASK_AHEAD | runs | others' lookup waits ms (mean a job) | waited lookups (mean) "
        "| regret us (mean) | all_reduce 64 MiB converged at (mean call) | mean gain by task |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
    for ask, rs in rows.items():
        keys = sorted({k for r in rs for k in r["gains"]})
        mg = []
        for k in keys:
            v = [r["gains"][k] for r in rs if isinstance(r["gains"].get(k), float)]
            mg.append(f"{k} {statistics.fmean(v):.3f}" if v else f"{k} -")
        print(
            f"| {ask} | {len(rs)} | {statistics.fmean(r['wait_ms'] for r in rs):.1f} "
            f"| {statistics.fmean(r['waited'] for r in rs):.1f} "
            f"| {statistics.fmean(r['regret_us'] for r in rs):.0f} "
            f"| {mean_or_dash([r['big_converged_at'] for r in rs])} "
            f"| {', '.join(mg)} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
