"""Start N ranks of tests/resilience/train_worker.py with a hard time-out (a hang fails the test).

The key-value store is hosted here, outside the ranks (as torchrun's agent does), so that any rank,
rank 0 included, can be killed without taking the store with it. With `replace`, a rank that was killed
is started again as a newcomer (a replacement worker that joins the running job)."""

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
    codes: dict[int, int | None]  # the exit status of each rank's last process
    outputs: dict[int, dict[str, Any]] = field(default_factory=dict)
    logs: dict[int, str] = field(default_factory=dict)
    hung: list[int] = field(default_factory=list)
    seconds: float = 0.0
    replaced: dict[int, int | None] = field(default_factory=dict)  # rank -> its first process's status

    def describe(self) -> str:
        return "\n".join(f"--- rank {r} (exit {self.codes[r]}):\n{self.logs[r][-3000:]}" for r in self.codes)


def run_ranks(n: int, args: list[str], out: Path, timeout_s: float, replace: tuple[int, ...] = ()) -> Run:
    import torch.distributed as dist

    out.mkdir(parents=True, exist_ok=True)
    store = dist.TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=120), wait_for_workers=False)
    port = store.port
    pp = os.environ.get("PYTHONPATH", "")

    def start(r: int, extra: list[str], log_name: str) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        env.update(
            {
                "RANK": str(r),
                "WORLD_SIZE": str(n),
                "LOCAL_RANK": str(r),
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port),
                "TORCHELASTIC_USE_AGENT_STORE": "True",
                "OMP_NUM_THREADS": "1",
                "PYTHONPATH": os.pathsep.join([str(REPO / "python"), *([pp] if pp else [])]),
            }
        )
        with open(out / log_name, "ab") as log:
            return subprocess.Popen(
                [sys.executable, str(WORKER), *args, *extra, "--out", str(out)],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    t0 = time.monotonic()
    procs = {r: start(r, [], f"rank{r}.log") for r in range(n)}
    replaced: dict[int, int | None] = {}
    deadline = t0 + timeout_s
    while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
        for r in replace:
            if r not in replaced and procs[r].poll() == -signal.SIGKILL:
                replaced[r] = procs[r].returncode
                with open(out / f"rank{r}.log", "ab") as log:
                    log.write(b"\n--- replaced by a newcomer ---\n")
                procs[r] = start(r, ["--newcomer"], f"rank{r}.log")
        time.sleep(0.05)
    hung = [r for r, p in procs.items() if p.poll() is None]
    for r in hung:
        os.killpg(procs[r].pid, signal.SIGKILL)
        procs[r].wait()
    run = Run(
        {r: p.returncode for r, p in procs.items()},
        hung=hung,
        seconds=time.monotonic() - t0,
        replaced=replaced,
    )
    for r in procs:
        f = out / f"rank{r}.json"
        if f.is_file():
            run.outputs[r] = json.loads(f.read_text())
        run.logs[r] = (out / f"rank{r}.log").read_text(errors="replace")
    del store
    return run
