"""The demo of `tests/demo/test_demo.py::test_demo_end_to_end[processes]` (2 ranks as processes, 4M/64M,
25M bucket, seed 5) N times with STEPS calls per task: per run the latest call a task became stable at, and
for runs where one was stable after call 148 (or never) each task's demo and engine convergence, search start,
free wait calls and wait calls. Run beside busy loops to see load:
    (for j in 1 2 3; do timeout 300 python3 -c "while True: pass" & done; wait) &
    AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python python3 benchmarks/emu/demo_e2e_processes.py 80 200
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path


def main(runs: int, steps: int) -> None:
    late = 0
    for i in range(runs):
        with tempfile.TemporaryDirectory() as d:
            out = Path(d) / "out"
            args = ["demo", "--ranks", "2", "--sizes", "4M,64M", "--buckets", "25M", "--seed", "5"]
            args += ["--steps", str(steps), "-o", str(out), "--processes"]
            subprocess.run([sys.executable, "-m", "autoccl.cli", *args], check=True, capture_output=True)
            doc = json.loads((out / "results.json").read_text())
            trace: dict[tuple[str, int], dict[str, object]] = {}
            for f in (out / "emu-online").glob("trace.*.jsonl"):
                for line in f.read_text().splitlines():
                    r = json.loads(line)
                    if r.get("ev") == "task" and r.get("rank") == 0:
                        trace[(r["coll"], int(r["bytes"]))] = r
            worst = max(t["converged_at"] if t["converged_at"] is not None else 10**9 for t in doc["tasks"])
            detail = ""
            if worst > 148:
                late += 1
                keys = ("converged_at", "search_from", "search_free_wait_calls", "search_wait_calls")
                detail = " ".join(
                    f"{t['coll']}/{t['bytes'] >> 20}MiB demo {t['converged_at']} engine "
                    + "/".join(str(trace.get((t["coll"], t["bytes"]), {}).get(k)) for k in keys)
                    for t in doc["tasks"]
                )
            print(i, "latest stable at", worst if worst < 10**9 else None, detail, flush=True)
    print(f"{runs} runs of {steps} steps: {late} with a task stable after call 148 or never")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 40, int(sys.argv[2]) if len(sys.argv) > 2 else 200)
