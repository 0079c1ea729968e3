"""Rank skew in the emulator: how often online mode converges within 3 % of the model's best when ranks
reach each kernel up to `skew` apart, over scenario seeds (clean) and fault seeds (5 % of coordinator
frames dropped and duplicated, 0-3 ms delays), with `AUTOCCL_XPROC_SCORE` shortest (default) or own.
The scenario is the one of tests/emu/test_online.py::test_online_processes_skewed_ranks_converge.

AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/skew_seeds.py \
    > benchmarks/results/cpu/rank-skew-scenario/skew_seeds.md
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

from test_online import Host, bounded, check_converged, online_env, run, scenario


def one(plugin: Path, skew_ns: int, seed: int, **env: str) -> str:
    base = bounded(scenario(300, seed=seed, noise=False))
    sc = replace(base, hosts={0: Host(delay_us=200)}, skew_ns=skew_ns)
    res = run(sc, plugin=plugin, env=online_env(True, **env), processes=True, timeout=300)
    try:
        ratios = check_converged(res)
    except AssertionError as e:
        key = e.args[0][0] if e.args and isinstance(e.args[0], tuple) else "?"
        return f"off: {key}"
    return f"within 3 % (worst {max(ratios.values()):.3f}x best)"


def main() -> int:
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    print("| scoring | skew | scenario seed | faults | result |")
    print("| --- | ---: | ---: | --- | --- |")
    for skew in (2_000_000, 5_000_000):
        for seed in range(1, 9):
            print(f"| shortest | {skew // 1000} us | {seed} | none | {one(plugin, skew, seed)} |", flush=True)
    for fseed in range(1, 5):
        faults = f"drop=0.05,dup=0.05,delay_ms=3,seed={fseed}"
        r = one(plugin, 5_000_000, 5, AUTOCCL_COORD_FAULTS=faults)
        print(f"| shortest | 5000 us | 5 | {faults} | {r} |", flush=True)
    for seed in (5,):
        r = one(plugin, 5_000_000, seed, AUTOCCL_XPROC_SCORE="own")
        print(f"| own | 5000 us | {seed} | none | {r} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
