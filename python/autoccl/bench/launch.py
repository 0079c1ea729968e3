"""Starting the benchmark processes of one launch (one environment).

Two ways:
* local: no WORLD_SIZE/SLURM_* in the environment: this process starts `nproc` workers itself, with an
  environment rendezvous on 127.0.0.1 and a free port.
* distributed: the harness itself runs under torchrun (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR,
  MASTER_PORT) or srun (SLURM_NTASKS, SLURM_PROCID, SLURM_LOCALID; MASTER_ADDR must be set): every
  harness process starts exactly one worker per launch, and launch i rendezvouses on MASTER_PORT + 1 + i,
  so each launch gets fresh processes (and environments) on every host.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoccl import jsonout


class LaunchError(RuntimeError):
    pass


@dataclass(frozen=True)
class Topology:
    distributed: bool
    world_size: int  # total processes of one launch
    rank: int  # this harness process's global rank (0 in local mode)
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int  # base port (distributed); 0 in local mode (a free port per launch)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def detect_topology(nproc: int | None, env: Mapping[str, str] | None = None) -> Topology:
    """torchrun/srun variables win over `nproc`; without them this process starts `nproc` workers."""
    e = os.environ if env is None else env
    if "WORLD_SIZE" in e and "RANK" in e:
        world, rank = int(e["WORLD_SIZE"]), int(e["RANK"])
        local_rank = int(e.get("LOCAL_RANK", "0"))
        lws = int(e.get("LOCAL_WORLD_SIZE", str(world)))
    elif "SLURM_NTASKS" in e and "SLURM_PROCID" in e:
        world, rank = int(e["SLURM_NTASKS"]), int(e["SLURM_PROCID"])
        local_rank = int(e.get("SLURM_LOCALID", "0"))
        lws = int(e.get("SLURM_NTASKS_PER_NODE", "1").split("(")[0])
        if "MASTER_ADDR" not in e:
            raise LaunchError(
                "under srun, set MASTER_ADDR (the first host of the allocation) for the rendezvous"
            )
    else:
        if nproc is None or nproc < 1:
            raise LaunchError("number of processes must be >= 1")
        return Topology(False, nproc, 0, 0, nproc, "127.0.0.1", 0)
    if nproc is not None and nproc != lws:
        raise LaunchError(f"--nproc {nproc} conflicts with the launcher's {lws} processes per host")
    return Topology(
        True,
        world,
        rank,
        local_rank,
        lws,
        e.get("MASTER_ADDR", "127.0.0.1"),
        int(e.get("MASTER_PORT", "29500")),
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signal_note(status: int) -> str:
    """What a worker's negative exit status says: the signal that ended it, and for SIGKILL, which nothing in
    the harness sends unplanned, its usual cause (a 350m model on a CPU machine of 23 GB: the log ends
    mid-step with no error of its own)."""
    if status >= 0:
        return ""
    try:
        name = signal.Signals(-status).name
    except ValueError:
        return f" (killed by signal {-status})"
    if -status == signal.SIGKILL:
        return f" (killed by {name}: out of memory? the kernel's OOM killer sends it; see `dmesg`)"
    return f" (killed by {name})"


def _tail(path: Path, n: int = 30) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def run_launch(
    topo: Topology,
    index: int,
    spec: dict[str, Any],
    env: Mapping[str, str],
    workdir: Path,
    *,
    timeout_s: float,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any] | None:
    """Start this host's workers of one launch, wait for them, return rank 0's result (None on other
    hosts). A worker that fails (or a timeout) stops the others of this launch and raises LaunchError
    with the end of its log."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec = dict(spec)
    spec["out"] = str(workdir / "result.json")
    spec["timeout_s"] = timeout_s
    spec["parent_pid"] = os.getpid()  # the worker dies with this process (worker._die_with_parent)
    spec_path = workdir / f"spec.{topo.rank}.json"
    spec_path.write_text(jsonout.dumps(spec, indent=1))
    if topo.distributed:
        port = topo.master_port + 1 + index
        ranks = [(topo.rank, topo.local_rank)]
    else:
        port = free_port()
        ranks = [(r, r) for r in range(topo.world_size)]
    procs: list[tuple[int, subprocess.Popen[str], Path]] = []
    p_env: dict[int, dict[str, str]] = {}
    readers: list[threading.Thread] = []
    # A rank the spec kills on purpose (resilience runs) may die by SIGKILL; the store then lives in
    # this harness (as under torchrun's agent) so that losing rank 0 does not take the store with it.
    killed = _planned_kill(spec)
    store = _host_store(port, timeout_s) if killed is not None and topo.is_main else None
    try:
        for rank, local_rank in ranks:
            child = dict(env)
            child.update(
                {
                    "RANK": str(rank),
                    "WORLD_SIZE": str(topo.world_size),
                    "LOCAL_RANK": str(local_rank),
                    "LOCAL_WORLD_SIZE": str(topo.local_world_size),
                    "MASTER_ADDR": topo.master_addr,
                    "MASTER_PORT": str(port),
                    "PYTHONUNBUFFERED": "1",
                }
            )
            # Under torchrun the harness inherits TORCHELASTIC_USE_AGENT_STORE=True, which tells a worker of
            # rank 0 not to serve the store: the launch's store on MASTER_PORT + 1 + i has no agent behind
            # it, and every worker would wait for it until the timeout.
            child.pop("TORCHELASTIC_USE_AGENT_STORE", None)
            if killed is not None:
                child["TORCHELASTIC_USE_AGENT_STORE"] = "True"
            p_env[rank] = child
            if spec["device"] == "cpu" and "OMP_NUM_THREADS" not in child:
                child["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // topo.local_world_size))
            log = workdir / f"rank{rank}.log"
            proc, reader = _start_worker(spec_path, child, log, on_progress if rank == 0 else None)
            procs.append((rank, proc, log))
            readers.append(reader)
        deadline = time.monotonic() + timeout_s
        replaced = False
        while True:
            if spec.get("rejoin") and not replaced:
                for i, (r, p, _) in enumerate(procs):
                    if r == killed and p.poll() == -signal.SIGKILL:
                        # The replacement worker for the killed rank (`--rejoin`): it joins the running job.
                        replaced = True
                        log = workdir / f"rank{r}.newcomer.log"
                        newcomer_spec = workdir / f"spec.{r}.newcomer.json"
                        newcomer_spec.write_text(jsonout.dumps({**spec, "newcomer": True}, indent=1))
                        proc, reader = _start_worker(newcomer_spec, p_env[r], log, None)
                        procs[i] = (r, proc, log)
                        readers.append(reader)
            codes = [p.poll() for _, p, _ in procs]
            failed = [
                (r, c, log)
                for (r, _, log), c in zip(procs, codes, strict=True)
                if c not in (None, 0) and not (r == killed and c == -signal.SIGKILL)
            ]
            if failed:
                r, c, log = failed[0]
                for t in readers:
                    t.join(timeout=5)
                raise LaunchError(
                    f"rank {r} exited with status {c}{signal_note(c)}; end of {log}:\n{_tail(log)}"
                )
            ended = [
                c == 0 or (r == killed and c == -signal.SIGKILL)
                for (r, _, _), c in zip(procs, codes, strict=True)
            ]
            if all(ended):
                break
            if time.monotonic() > deadline:
                raise LaunchError(f"launch timed out after {timeout_s:.0f} s; logs in {workdir}")
            time.sleep(0.05)
        for t in readers:
            t.join(timeout=10)
    finally:
        _stop(procs)
        del store
    if not topo.is_main:
        return None
    out = Path(spec["out"])
    if not out.is_file():
        raise LaunchError(f"rank 0 finished without writing {out}")
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def _start_worker(
    spec_path: Path, env: Mapping[str, str], log: Path, on_progress: Callable[[int, int], None] | None
) -> tuple[subprocess.Popen[str], threading.Thread]:
    """One worker process and the thread that copies its output to `log`."""
    logf = open(log, "w")  # closed by the reader thread
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoccl.bench.worker", str(spec_path)],
        env=dict(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    reader = threading.Thread(target=_pump, args=(proc, logf, on_progress), daemon=True)
    reader.start()
    return proc, reader


def _planned_kill(spec: dict[str, Any]) -> int | None:
    """The rank a resilience run kills on purpose (`--kill RANK:STEP`), if any."""
    kill = spec.get("kill") if spec.get("inject") else None
    return int(str(kill).split(":")[0]) if kill else None


def _host_store(port: int, timeout_s: float) -> Any:
    import datetime

    import torch.distributed as dist

    try:
        return dist.TCPStore(
            "0.0.0.0", port, None, True, datetime.timedelta(seconds=timeout_s), wait_for_workers=False
        )
    except (RuntimeError, OSError) as e:
        raise LaunchError(f"could not host the key-value store on port {port}: {e}") from None


def _pump(proc: subprocess.Popen[str], logf: Any, on_progress: Callable[[int, int], None] | None) -> None:
    assert proc.stdout is not None
    with logf:
        for line in proc.stdout:
            if line.startswith("@@progress "):
                if on_progress is not None:
                    try:
                        done, total = (int(x) for x in line.split()[1:3])
                    except ValueError:
                        continue
                    on_progress(done, total)
                continue
            logf.write(line)
            logf.flush()


def _stop(procs: list[tuple[int, subprocess.Popen[str], Path]]) -> None:
    """Terminate the workers this call started that are still running (by their own process group)."""
    alive = [p for _, p, _ in procs if p.poll() is None]
    for p in alive:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + 10
    for p in alive:
        try:
            p.wait(timeout=max(0.1, end - time.monotonic()))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
