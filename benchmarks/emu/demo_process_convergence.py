"""The default demo with one process per rank, N times: per task stable after call 140, the call the demo saw
it stable at and what the authority's trace says of its search (converged_at, free wait calls, wait calls,
duel extensions). Usage:
    AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python python3 benchmarks/emu/demo_process_convergence.py 40
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from autoccl.demo import DemoConfig, run_demo


def main(runs: int) -> None:
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
                    "free",
                    r.get("search_free_wait_calls"),
                    "wait",
                    r.get("search_wait_calls"),
                    "ext",
                    r.get("search_duel_extensions"),
                    flush=True,
                )
    print(f"{runs} runs done")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40)
