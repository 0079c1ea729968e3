"""The default demo with one process per rank, N times: per task stable after call 140, the call the demo
saw it stable at and what the authority's trace says of its search (converged_at, where it started, samples
of NCCL's choice taken from calls before that, free wait calls, wait calls, duel extensions); at the end, the
latest call a task became stable at, counted from call 0, and how many searches started late. Usage:
    AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python python3 benchmarks/emu/demo_process_convergence.py 40
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from autoccl.demo import DemoConfig, run_demo


def main(runs: int) -> None:
    latest = 0
    late_starts = 0
    latest_start = 0
    tasks = 0
    for i in range(runs):
        with tempfile.TemporaryDirectory() as d:
            res = run_demo(DemoConfig(processes=True), Path(d) / "out")
        trace = {
            (str(r["coll"]), int(r["bytes"])): r
            for r in res.online.trace
            if r.get("ev") == "task" and int(r.get("rank", -1)) == 0
        }
        for t in res.tasks:
            r = trace.get((t.key.coll, t.key.nbytes), {})
            tasks += 1
            latest = max(latest, t.converged_at if t.converged_at is not None else 10**9)
            late_starts += int(r.get("search_from") or 0) > 0
            latest_start = max(latest_start, int(r.get("search_from") or 0))
            if t.converged_at is None or t.converged_at > 140:
                print(
                    i,
                    t.key.coll,
                    t.key.nbytes >> 20,
                    "demo conv",
                    t.converged_at,
                    "engine conv",
                    r.get("converged_at"),
                    "search_from",
                    r.get("search_from"),
                    "prior",
                    r.get("search_prior_samples"),
                    "free",
                    r.get("search_free_wait_calls"),
                    "wait",
                    r.get("search_wait_calls"),
                    "ext",
                    r.get("search_duel_extensions"),
                    flush=True,
                )
    print(
        f"{runs} runs done: {tasks} tasks, {late_starts} searches started after call 0 "
        f"(the latest at call {latest_start}), latest stable at call {latest}"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
