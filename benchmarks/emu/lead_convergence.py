"""Where each search of tests/emu/test_logs.py's scenario ends (4 ranks as threads, all_reduce 1 and 32 MiB
and all_gather 4 MiB, 1200 calls each) with the rank threads unbounded (`lead` 0) and within 8 calls of each
other, several emulator runs at a time beside busy loops (the load under which CI found no search ended).

AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python python3 benchmarks/emu/lead_convergence.py \
    --runs 12 --workers 3 --busy 4 > benchmarks/results/cpu/tests-under-load/lead_convergence.md
"""

from __future__ import annotations

import argparse
import multiprocessing
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoccl.emu import run, simple

TASKS = {"allreduce": [1 << 20, 32 << 20], "allgather": [4 << 20]}
CALLS = 1200


def one(lead: int) -> list[dict[str, Any]]:
    """Each task's search record on the authority (rank 0) in one run."""
    with tempfile.TemporaryDirectory(prefix="autoccl-lead-") as tmp:
        env = {
            "AUTOCCL_MODE": "online",
            "AUTOCCL_HW": "GPU Xx4",
            "AUTOCCL_CACHE_DIR": str(Path(tmp) / "cache"),
        }
        res = run(replace(simple(TASKS, nranks=4, repeat=CALLS), lead=lead), env=env, timeout=240)
    return [t for t in res.trace if t.get("ev") == "task" and t["rank"] == 0]


def spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=12, help="runs per lead")
    ap.add_argument("--workers", type=int, default=3, help="emulator runs at a time")
    ap.add_argument("--busy", type=int, default=4, help="busy loops beside them")
    a = ap.parse_args()
    busy = [multiprocessing.Process(target=spin, daemon=True) for _ in range(a.busy)]
    for p in busy:
        p.start()
    try:
        print(
            f"{a.runs} runs per lead, {a.workers} at a time, beside {a.busy} busy loops; "
            f"{CALLS} calls a task\n"
        )
        print(
            "| lead | task | runs whose search ended | ended at call (min–max) | search samples (min–max) |"
        )
        print("| ---: | --- | ---: | --- | --- |")
        for lead in (0, 8):
            with ThreadPoolExecutor(a.workers) as pool:
                runs = list(pool.map(one, [lead] * a.runs))
            for coll, sizes in TASKS.items():
                for b in sizes:
                    recs = [t for r in runs for t in r if t["coll"] == coll and int(t["bytes"]) == b]
                    ended = [int(t["converged_at"]) for t in recs if t.get("converged_at") is not None]
                    samples = [int(t["search_samples"]) for t in recs]
                    span = f"{min(ended)}–{max(ended)}" if ended else "—"
                    print(
                        f"| {lead} | {coll} {b >> 20} MiB | {len(ended)} of {len(recs)} | {span} | "
                        f"{min(samples)}–{max(samples)} |"
                    )
    finally:
        for p in busy:
            p.terminate()


if __name__ == "__main__":
    main()
