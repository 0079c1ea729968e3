"""Start N local worker processes on one process group (gloo on CPUs, NCCL on GPUs) and collect what each
returns: used by `autoccl topo/profile --nproc N` when not started by a launcher, and by the tests.

Workers come from a fork server that has imported torch once, so starting 8 ranks costs little more than
starting one. Under torchrun (WORLD_SIZE set) the CLI uses the launcher's process group instead.

With `hosts=True` (the CLI's --hosts-on-one-gpu) every rank takes GPU 0 and is a host of its own to NCCL
(`host_env`), as benchmarks/gpu/hosts_on_one_gpu.sh makes mpirun's ranks: NCCL refuses two ranks of one host
on one GPU, and ranks of different hosts meet through its network transport, here sockets over loopback.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import traceback
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from autoccl.tuner_env import SAFETY_ENV, free_local_port


def launched() -> bool:
    """True when a launcher started this process as one rank of a job (torchrun-style variables)."""
    return "WORLD_SIZE" in os.environ and "RANK" in os.environ


# Imported once by the fork server, before the first worker: what every worker would import anyway.
# Effective only before the first run_local of a process (the server then lives on).
PRELOAD: list[str] = ["torch", "torch.distributed", "autoccl.adaptive.jobs"]


# As benchmarks/gpu/hosts_env.sh names the hosts of hosts_on_one_gpu.sh.
HOST_ID_PREFIX = "autoccl-host-"


def host_env(rank: int) -> dict[str, str]:
    """What makes local rank `rank` a host of its own (hosts=True): to NCCL, a host id of its own and sockets
    over loopback for the network transport; to `autoccl topo`'s detection, a host name of its own
    (AUTOCCL_TOPO_HOST), so the ranks on one GPU are described as the hosts NCCL takes them for. Set in the
    rank's process before NCCL initialises; over the variables of the command's environment."""
    host = f"{HOST_ID_PREFIX}{rank}"
    return {
        "NCCL_HOSTID": host,
        "NCCL_NET": "Socket",
        "NCCL_SOCKET_IFNAME": "lo",
        "NCCL_IB_DISABLE": "1",
        "AUTOCCL_TOPO_HOST": host,
    }


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its rank and error."""


def _entry(
    rank: int,
    world: int,
    port: int,
    backend: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    env: dict[str, str],
    results: Any,
    timeout_s: float,
    hosts: bool = False,
) -> None:
    os.environ.update(env)
    if hosts:
        os.environ.update(host_env(rank))
    if backend == "nccl":
        os.environ.update(SAFETY_ENV)  # NVLink multicast off in every launch, as the benchmark harness does
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    try:
        if backend == "nccl":
            torch.cuda.set_device(0 if hosts else rank % max(torch.cuda.device_count(), 1))
        store = dist.TCPStore("127.0.0.1", port, world, rank == 0, timedelta(seconds=timeout_s))
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world, timeout=timedelta(seconds=timeout_s)
        )
        if backend == "gloo":
            # Every rank's connections (gloo makes them at init) are up before any rank can leave: a rank
            # whose job needs no collective exited while a slower one still connected to it ("Connection
            # closed by peer", once in 15 runs beside busy loops). NCCL connects at its first collective.
            dist.barrier()
        out = fn(rank, world, *args)
        results.put((rank, True, out))
    except BaseException as e:
        results.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"))
    finally:
        try:
            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass


def run_local(
    fn: Callable[..., Any],
    nproc: int,
    *args: Any,
    backend: str = "gloo",
    env: dict[str, str] | None = None,
    timeout_s: float = 120.0,
    hosts: bool = False,
) -> list[Any]:
    """Run fn(rank, world, *args) in `nproc` processes on one process group; return the results by rank.
    `fn` must be importable (a module-level function). `env` is set in every rank; with `hosts`, every rank
    is a host of its own on GPU 0 (host_env)."""
    if nproc < 1:
        raise ValueError("nproc must be at least 1")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(list(PRELOAD))
    results = ctx.Queue()
    port = free_local_port()
    procs = [
        ctx.Process(
            target=_entry,
            args=(r, nproc, port, backend, fn, args, dict(env or {}), results, timeout_s, hosts),
            daemon=True,
        )
        for r in range(nproc)
    ]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    errors: list[str] = []
    try:
        for _ in range(nproc):
            try:
                rank, ok, value = results.get(timeout=timeout_s + 30)
            except Exception:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0)]
                raise WorkerError(
                    f"workers did not finish within {timeout_s + 30:.0f} s"
                    + (f" (rank(s) {dead} died)" if dead else "")
                ) from None
            if ok:
                got[rank] = value
            else:
                errors.append(f"rank {rank}: {value}")
                break
    finally:
        for p in procs:
            p.join(timeout=5 if not errors else 0.5)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        raise WorkerError(errors[0])
    return [got[r] for r in range(nproc)]
