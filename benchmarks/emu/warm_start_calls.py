"""Calls a rerun takes to pin its tasks from a saved table, over repeated runs: the largest per run (the warm
start of tests/emu/test_online.py::test_online_threads_converge_and_warm_start).

AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/warm_start_calls.py 20
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections import Counter
from pathlib import Path

from test_online import bounded, online_env, run, scenario, tasks_of


def main() -> int:
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    worst: Counter[int] = Counter()
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as d:
            env = online_env(False, AUTOCCL_CACHE_DIR=f"{d}/cache")
            sc = bounded(scenario(300, noise=False))
            run(sc, plugin=plugin, env=env, timeout=300)  # cold: writes the table
            res = run(sc, plugin=plugin, env=env, timeout=300)  # warm: starts from it
            calls = [int(t["converged_at"]) - int(t["search_from"]) for t in tasks_of(res).values()]
            worst[max(calls)] += 1
    print(f"{runs} warm runs; largest calls to pin per run: count")
    for calls, n in sorted(worst.items()):
        print(f"{calls}: {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
