"""Start N ranks of tests/resilience/train_worker.py with a hard time-out (a hang fails the test).

The key-value store is hosted here, outside the ranks (as torchrun's agent does), so that any rank,
rank 0 included, can be killed without taking the store with it."""

from __future__ import annotations

import datetime
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
WORKER = Path(__file__).with_name("train_worker.py")


@dataclass
class Run:
    codes: dict[int, int | None]
    outputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)
    hung: list[int] = field(default_factory=list)
    seconds: float = 0.0

    def describe(self) -> str:
        return "\n".join(f"--- rank {r} (exit {self.codes[r]}):\n{self.logs[r][-3000:]}" for r in self.codes)


def run_ranks(n: int, args: list[str], out: Path, timeout_s: float) -> Run:
    import torch.distributed as dist

    out.mkdir(parents=True, exist_ok=True)
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=120), wait_for_workers=False)
    pp = os.environ.get("PYTHONPATH", "")
    procs: dict[int, subprocess.Popen[bytes]] = {}
    t0 = time.monotonic()
    for r in range(n):
        env = dict(os.environ)
        env.update(
            {
                "RANK": str(r),
                "WORLD_SIZE": str(n),
                "LOCAL_RANK": str(r),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(store.port),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join([str(REPO / "python"), *([pp] if pp else [])]),
            }
        )
        log = open(out / f"rank{r}.log", "wb")
        procs[r] = subprocess.Popen(
            [sys.executable, str(WORKER), *args, "--out", str(out)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
    deadline = t0 + timeout_s
    hung = []
    for r, p in procs.items():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            hung.append(r)
    for r in hung:
        os.killpg(procs[r].pid, signal.SIGKILL)
        procs[r].wait()
    run = Run({r: p.returncode for r, p in procs.items()}, hung=hung, seconds=time.monotonic() - t0)
    for r in procs:
        f = out / f"rank{r}.json"
        if f.is_file():
            run.outputs[r] = json.loads(f.read_text())
        run.logs[r] = (out / f"rank{r}.log").read_text(errors="replace")
    del store
    return run
