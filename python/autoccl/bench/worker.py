"""One benchmark process: `python -m autoccl.bench.worker SPEC.json`.

Started by the launcher (autoccl.bench.launch) with RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and
MASTER_PORT in its environment, and the launch's NCCL/plugin variables. Global rank 0 writes the result
(JSON) to spec["out"] and reports progress as `@@progress DONE TOTAL` lines on stdout."""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import sys
import time
from typing import Any

from autoccl import jsonout

# Variables worth recording as the environment a launch actually ran with.
_RECORD_PREFIXES = ("NCCL_", "AUTOCCL_", "TORCH_NCCL_", "NVSHMEM_", "TORCH_SYMM_MEM_", "CUDA_VISIBLE_DEVICES")


def recorded_env() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(_RECORD_PREFIXES)}


def _die_with_parent(parent: Any) -> None:
    """SIGTERM when the harness process that started this worker dies, whatever killed it (Linux): a
    worker left running holds GPUs and ports. A harness stopped by SIGTERM or Ctrl-C also terminates its
    workers itself."""
    if not isinstance(parent, int) or not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        return
    if os.getppid() != parent:  # the parent died before the prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m autoccl.bench.worker SPEC.json", file=sys.stderr)
        return 2
    with open(argv[0]) as f:
        spec: dict[str, Any] = json.load(f)
    _die_with_parent(spec.get("parent_pid"))
    # the time of every warning (the resilient reducer's recoveries and joins): a rank's log then says when
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.WARNING)

    import torch
    import torch.distributed as dist

    from autoccl.bench.hostinfo import host_info

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if spec["device"] == "cuda":
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
        threads = os.environ.get("OMP_NUM_THREADS")
        if threads:
            torch.set_num_threads(int(threads))
    timeout = datetime.timedelta(seconds=float(spec.get("timeout_s", 600)))
    t0 = time.time()
    kw: dict[str, Any] = {"device_id": device} if spec["device"] == "cuda" else {}
    if spec.get("newcomer"):
        # A replacement worker (`--rejoin`): the job's default group is closed to it, so it has its own
        # (DDP needs one) and joins the job's resilient reducer through the job's store.
        dist.init_process_group(
            spec["backend"], store=dist.HashStore(), rank=0, world_size=1, timeout=timeout, **kw
        )
        meta = dist.group.WORLD
    else:
        dist.init_process_group(spec["backend"], rank=rank, world_size=world, timeout=timeout, **kw)
        meta = dist.new_group(backend="gloo") if spec["backend"] != "gloo" else dist.group.WORLD
    init_s = time.time() - t0

    def progress(done: int, total: int) -> None:
        if rank == 0:
            print(f"@@progress {done} {total}", flush=True)

    result: dict[str, Any] = {"rank0_env": recorded_env(), "world_size": world, "init_s": init_s}
    if spec["kind"] == "coll":
        from autoccl.bench.coll import Clock, Ctx, run_coll

        ctx = Ctx(rank, world, device, Clock(device), meta, seed=int(spec.get("seed", 1234)))
        result.update(run_coll(ctx, spec, progress))
    elif spec["kind"] == "train":
        from autoccl.bench.train import run_train

        result.update(run_train(spec, rank, world, device, meta, progress))
    else:
        raise SystemExit(f"unknown kind {spec['kind']!r}")
    # A resilience run that lost a rank ends on the survivors' group, written by the lowest survivor
    # that ran from the start (a replacement worker's record starts where it joined).
    group = result.pop("_group", meta)
    lost = bool((result.get("resilience") or {}).get("recoveries")) or spec.get("newcomer", False)
    if rank == int(result.get("writer", 0)):
        result["host"] = host_info(spec["device"])
        tmp = spec["out"] + ".tmp"
        with open(tmp, "w") as f:
            f.write(jsonout.dumps(result))
        os.replace(tmp, spec["out"])
    end_barrier(group, device)
    if not lost:  # with a lost rank the default group cannot be torn down collectively
        dist.destroy_process_group()
    else:
        end_after_a_loss(group)
    if spec["backend"] == "gloo":
        # Gloo alone (no NCCL, so no plugin whose exit handlers flush its trace or serve the coordinator):
        # leave without the interpreter's finalization. Gloo's threads may still hold work objects whose
        # tensors reference Python objects, and releasing them while the interpreter is torn down aborts the
        # process ("terminate called without an active exception": a DDP rank on the CPU, now and then in CI;
        # pytorch/pytorch#179291 analyses the same abort).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return 0


def end_after_a_loss(group: Any) -> None:
    """Tear down the groups of a run that lost a rank, every live rank being past end_barrier. The group it
    ended on is shut down (its last operations flushed first: aborting it at once could leave a peer inside
    the barrier waiting for bytes still in this rank's network proxy). The others still count the lost rank:
    they are aborted, which waits for no peer. A survivor that left them to the interpreter's exit stayed
    alive until the launch's timeout (NCCL, one H200, two ranks as two hosts)."""
    import torch.distributed as dist

    from autoccl.resilience.group import close

    close(group, registered=isinstance(group, dist.ProcessGroup))
    dist.distributed_c10d._abort_process_group()


def end_barrier(group: Any, device: Any) -> None:
    """Every rank past the result before any leaves. dist.barrier takes only groups registered with
    torch.distributed; a resilience run that lost a rank ends on a group the reducer made directly, which
    barrier() refuses on CUDA ("Expecting a ProcessGroup", one H200, two ranks as two hosts) and passes on
    the CPU. There, a one-element all_reduce (what barrier runs) does it."""
    import torch
    import torch.distributed as dist

    if isinstance(group, dist.ProcessGroup):
        dist.barrier(group=group)
        return
    dist.all_reduce(torch.zeros(1, device=device), group=group)
    if device.type == "cuda":
        torch.cuda.synchronize(device)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
