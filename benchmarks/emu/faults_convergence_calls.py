"""Calls to convergence under coordinator faults on a loaded host: the scenario of
tests/emu/test_online.py::test_online_processes_skewed_ranks_converge[faults] (ranks 5 ms out of step, 5 %
of frames dropped and duplicated, 0-3 ms delays), run RUNS times in each of PARALLEL concurrent workers (the
load that made CI converge a task at call 155). Prints, per task record of rank 0, the distribution of
converged_at minus search_free_wait_calls, the quantity the test bounds.

AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/faults_convergence_calls.py \
    > benchmarks/results/cpu/faults-convergence/faults_convergence_calls.md
"""

from __future__ import annotations

import os
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

from test_online import Host, bounded, online_env, run, scenario, tasks_of

FAULTS = "drop=0.05,dup=0.05,delay_ms=3,seed=3"


def worker(runs: int) -> list[int]:
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    out = []
    for i in range(runs):
        sc = replace(bounded(scenario(300, noise=False)), hosts={0: Host(delay_us=200)}, skew_ns=5_000_000)
        res = run(
            sc, plugin=plugin, env=online_env(True, AUTOCCL_COORD_FAULTS=FAULTS), processes=True, timeout=300
        )
        for t in tasks_of(res).values():
            free = int(t.get("search_free_wait_calls") or 0)
            out.append(int(t["converged_at"]) - int(t["search_from"]) - free)
        print(f"worker run {i + 1}/{runs} done", file=sys.stderr, flush=True)
    return out


def main() -> None:
    parallel = int(os.environ.get("PARALLEL", "5"))
    runs = int(os.environ.get("RUNS", "8"))
    with ProcessPoolExecutor(parallel) as ex:
        calls = [c for part in ex.map(worker, [runs] * parallel) for c in part]
    hist = Counter(
        "<= 144" if c <= 144 else "145-150" if c <= 150 else "151-214" if c <= 214 else "> 214" for c in calls
    )
    print(f"# Calls to convergence under coordinator faults ({parallel} parallel workers x {runs} runs)\n")
    print(f"Faults `{FAULTS}`, skew 5 ms; {len(calls)} task records (4 tasks per run).\n")
    print("| converged_at - search_from - free waits | tasks |\n| --- | ---: |")
    for k in ("<= 144", "145-150", "151-214", "> 214"):
        print(f"| {k} | {hist.get(k, 0)} |")
    print(f"\nlargest: {sorted(calls)[-5:]}")


if __name__ == "__main__":
    main()
