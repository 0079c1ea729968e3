"""What asking the authority ahead (AUTOCCL_ASK_AHEAD) does to all_reduce 64 MiB's search in the emulator's
four-process job (test_online.py::test_online_processes_tcp_converge's, noise off): the authority's task
record per setting, its samples, the calls it spent waiting for samples (counted against maxTuningCalls
unless free; of the free ones, those planned beyond the job's present call), where it converged and the
gain it pinned. --build labels the rows (several builds, one table: run it once per AUTOCCL_LIB_DIR).

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/ask_ahead_budget.py \
    --seed 5 --build "$(git rev-parse --short HEAD)" > benchmarks/results/cpu/ask-ahead/budget.md
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import replace
from pathlib import Path

from test_online import Host, bounded, online_env, run, scenario

KEYS = (
    "search_samples",
    "search_wait_calls",
    "search_free_wait_calls",
    "search_ahead_wait_calls",
    "converged_at",
    "regret_stop",
    "gain",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=5)
    ap.add_argument("--asks", default="0,16,auto")
    ap.add_argument("--build", default="", help="a label for the rows (the build's commit)")
    ap.add_argument("--no-header", action="store_true", help="rows only (for a second build)")
    a = ap.parse_args()
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    if not a.no_header:
        print("| build | AUTOCCL_ASK_AHEAD | " + " | ".join(KEYS) + " |")
        print("| --- | --- |" + " ---: |" * len(KEYS))
    for ask in a.asks.split(","):
        sc = replace(bounded(scenario(300, seed=a.seed, noise=False)), hosts={0: Host(delay_us=200)})
        res = run(sc, plugin=plugin, env=online_env(True, AUTOCCL_ASK_AHEAD=ask), processes=True, timeout=300)
        for t in res.trace:
            if t.get("ev") == "task" and t.get("rank") == 0 and int(t.get("bytes") or 0) == 64 << 20:
                cells = " | ".join("-" if t.get(k) is None else str(t.get(k)) for k in KEYS)
                print(f"| {a.build} | {ask} | {cells} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
