"""One GPU: the resilient reducer's NCCL paths that need no second GPU.

Checks, on the image's PyTorch and NCCL: a process group made directly (`group.direct`, how every group
after the first is made: the survivors' and a grown one) sets up and runs the all_reduce and broadcast
the reducer calls; aborting and closing such a group; a second group made after aborting one (a
recovery); the reducer itself on CUDA tensors (a one-rank job, DDP buckets, CUDA events and futures)
for a few steps; and a lost rank and its replacement worker joining back with every rank's tensors on
the GPU (four processes share it over gloo: one GPU cannot hold two NCCL ranks): the newcomer's bucket
copies and the weights and optimizer state it receives, on CUDA. Writes one JSON line per check to
stdout and OUT/resilience-groups.json.

    OUT=/tmp/out python3 benchmarks/gpu/probes/resilience_groups.py
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F


def _check(name: str, fn: Any, results: list[dict[str, Any]]) -> None:
    t0 = time.monotonic()
    try:
        detail = fn()
        row = {"check": name, "ok": True, "detail": detail}
    except Exception as e:  # every check reports, none stops the others
        row = {
            "check": name,
            "ok": False,
            "error": f"{type(e).__name__}: {e}",
            "trace": traceback.format_exc()[-2000:],
        }
    row["seconds"] = round(time.monotonic() - t0, 3)
    results.append(row)
    print(json.dumps({k: v for k, v in row.items() if k != "trace"}), flush=True)


def main() -> int:
    from autoccl.resilience import group as G

    torch.cuda.set_device(0)
    dev = torch.device("cuda", 0)
    results: list[dict[str, Any]] = []
    store = dist.HashStore()

    def direct_group() -> dict[str, Any]:
        grp = G.direct("nccl", dist.PrefixStore("e1/pg/", store), (3,), 3, 30.0, "grown", dev)
        eager = hasattr(grp.pg, "eager_connect_single_device")
        t = torch.full((1024,), 2.0, device=dev)
        dist.all_reduce(t, group=grp.pg)
        b = torch.full((8,), 5.0, device=dev)
        dist.broadcast(b, group=grp.pg, group_src=0)
        torch.cuda.synchronize()
        G.release(grp)
        return {
            "all_reduce": float(t[0]),
            "broadcast": float(b[0]),
            "type": type(grp.pg).__name__,
            "connected_eagerly": eager,
        }

    def abort_then_regroup() -> dict[str, Any]:
        first = G.direct("nccl", dist.PrefixStore("e2/pg/", store), (0,), 0, 30.0, "grown", dev)
        t = torch.ones(16, device=dev)
        dist.all_reduce(t, group=first.pg)
        torch.cuda.synchronize()
        again = G.survivors_group(
            G.Group(first.pg, (0, 1), "nccl", "grown"), (0,), 0, dist.PrefixStore("e3/pg/", store), 30.0, dev
        )
        u = torch.ones(16, device=dev)
        dist.all_reduce(u, group=again.pg)
        torch.cuda.synchronize()
        G.release(again)
        return {"how": again.how, "sum": float(u.sum())}

    def reducer_on_cuda() -> dict[str, Any]:
        from torch.nn.parallel import DistributedDataParallel as DDP

        from autoccl.bench.presets import PRESETS
        from autoccl.bench.train import GPT, MarkovTokens
        from autoccl.resilience import ResilienceConfig
        from autoccl.resilience.reducer import Reducer

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", "29533")
        dist.init_process_group(
            "nccl", rank=0, world_size=1, device_id=dev, timeout=datetime.timedelta(seconds=60)
        )
        preset = PRESETS["tiny"]
        torch.manual_seed(0)
        model = GPT(preset).to(dev)
        ddp = DDP(model, bucket_cap_mb=0.1)
        opt = torch.optim.AdamW(ddp.parameters(), lr=2e-3)
        steps = 30
        red = Reducer(ddp, steps, ResilienceConfig(heartbeat_s=0.1, dead_after_s=2.0))
        data = MarkovTokens(preset.vocab, 0)
        losses = []
        while red.next_step < steps:
            g = torch.Generator().manual_seed(red.next_step)
            x = data.batch(8, 33, g).to(dev)
            loss = F.cross_entropy(ddp(x[:, :-1]).reshape(-1, preset.vocab), x[:, 1:].reshape(-1))
            loss.backward()
            red.step(opt)
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        red.close()
        stats = red.stats()
        dist.destroy_process_group()
        if not losses[-1] < losses[0]:
            raise RuntimeError(f"the loss did not fall: {losses[0]:.3f} -> {losses[-1]:.3f}")
        return {"rounds": stats["rounds"], "loss_first": losses[0], "loss_last": losses[-1]}

    def join_on_cuda() -> dict[str, Any]:
        from pathlib import Path as P

        sys.path.insert(0, str(P(__file__).resolve().parents[3] / "tests" / "resilience"))
        from resilience_ranks import run_ranks

        out = P(os.environ.get("OUT", ".")) / "join-on-cuda"
        # 575 steps of ~30 ms after the kill: the replacement's start (CUDA included) took ~5 s of them
        args = ["--mode", "resilient", "--steps", "600", "--kill", "2:25", "--bucket-mb", "0.1"]
        args += ["--compute-ms", "30", "--device", "cuda"]
        run = run_ranks(4, args, out, 400.0, replace=(2,))
        if run.hung or any(c != 0 for c in run.codes.values()):
            raise RuntimeError(f"exit codes {run.codes}, hung {run.hung}:\n{run.describe()[-3000:]}")
        digests = {r: o["digest"][:16] for r, o in run.outputs.items()}
        joins = run.outputs[0]["stats"]["joins"]
        newcomer = run.outputs[2]["stats"]
        if len(set(digests.values())) != 1 or not joins:
            raise RuntimeError(f"digests {digests}, joins {joins}")
        return {
            "replaced": run.replaced,
            "joined_at_step": joins[0]["round"],
            "group": run.outputs[0]["group"],
            "same_weights": True,
            "newcomer_copied_steps": newcomer["copied_steps"],
            "newcomer_reordered_steps": newcomer["reordered_steps"],
            "recoveries": [
                (x["lost"], round(x["seconds"], 2)) for x in run.outputs[0]["stats"]["recoveries"]
            ],
            "eval_loss": {r: round(o["eval_loss"], 4) for r, o in run.outputs.items()},
            "seconds": round(run.seconds, 1),
        }

    _check("direct NCCL group: all_reduce, broadcast, shutdown", direct_group, results)
    _check("abort a direct NCCL group, make the next one", abort_then_regroup, results)
    _check("the reducer on CUDA tensors (one rank, 30 steps)", reducer_on_cuda, results)
    _check(
        "a lost rank replaced and joining back, CUDA tensors over gloo (4 processes)", join_on_cuda, results
    )
    out = Path(os.environ.get("OUT", "."))
    (out / "resilience-groups.json").write_text(
        json.dumps(
            {
                "torch": torch.__version__,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())),
                "checks": results,
            },
            indent=1,
        )
    )
    return 0 if all(r["ok"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
