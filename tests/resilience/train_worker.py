"""One rank of a small DDP training run, synchronous or with the resilient reducer (tests start 4 of
these). The step's accelerator time is simulated with a sleep (`--compute-ms`), so step times do not
depend on how busy the CPU cores of the test machine are; the model (the bench's tiny GPT on Markov
tokens) still trains for real, so losses are comparable. Writes OUT/rank<R>.json. With `--newcomer` it
is a replacement worker: its default group is its own, and it joins the running job's reducer."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import signal
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from autoccl.bench.presets import PRESETS
from autoccl.bench.train import GPT, MarkovTokens
from autoccl.resilience import ResilienceConfig, ResilienceError
from autoccl.resilience.control import Decision
from autoccl.resilience.inject import Kill, Straggler, delay
from autoccl.resilience.reducer import Newcomer, Reducer


def _die(*_: object, **__: object) -> None:
    """SIGKILL this process (an injected loss; also stands in for a function that would run next)."""
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["sync", "resilient"], required=True)
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--compute-ms", type=float, default=40.0)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--straggler", default="")
    ap.add_argument("--kill", default="", help="RANK:STEP[,RANK:STEP...]: SIGKILL at that step")
    ap.add_argument("--min-members", type=int, default=0, help="ResilienceConfig.min_members")
    ap.add_argument("--corrupt", default="", help="RANK:ROUND: that rank misreads a decision (tests)")
    ap.add_argument(
        "--corrupt-admit", default="", help="RANK:ROUND: that rank reads a newcomer into a decision (tests)"
    )
    ap.add_argument("--dead-after", type=float, default=1.0)
    ap.add_argument(
        "--hang-regroup", action="store_true", help="the survivors' new group never forms (tests)"
    )
    ap.add_argument("--collective-timeout-s", type=float, default=20.0)
    ap.add_argument("--census-s", type=float, default=30.0)
    ap.add_argument("--recovery-s", type=float, default=120.0)
    ap.add_argument("--newcomer", action="store_true", help="join the running job (a replacement worker)")
    ap.add_argument(
        "--newcomer-dies",
        action="store_true",
        help="a newcomer dies once admitted, before the group forms (tests)",
    )
    ap.add_argument(
        "--newcomer-dies-asking",
        action="store_true",
        help="a newcomer dies right after posting its join request (tests)",
    )
    ap.add_argument(
        "--dies-sending",
        type=int,
        default=-1,
        help="RANK dies as it starts sending a newcomer the state (tests)",
    )
    ap.add_argument(
        "--fail-admit",
        type=int,
        default=-1,
        help="RANK fails the round that admits a newcomer, alone (tests)",
    )
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (every rank on GPU 0; gloo carries it)")
    ap.add_argument("--bucket-mb", type=float, default=0.0, help="DDP's bucket_cap_mb (0: its default)")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rank = int(os.environ["RANK"])
    torch.set_num_threads(1)
    # Every rank's reducer meets in the launcher's store itself (a newcomer cannot reach the default
    # group's prefix of it); a newcomer's own default group is its own (the job's is closed to it).
    job_store = dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), None, False, datetime.timedelta(seconds=60)
    )
    if a.newcomer:
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    else:
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    preset = PRESETS["tiny"]
    torch.manual_seed(a.seed + (1000 if a.newcomer else 0))  # a newcomer's own weights are replaced
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.cuda.set_device(0)
        device = torch.device("cuda", 0)
    model = GPT(preset).to(device)
    bucket = {"bucket_cap_mb": a.bucket_mb} if a.bucket_mb > 0 else {}
    ddp = DDP(model, **bucket)  # the tiny GPT has no buffers to synchronise
    opt = torch.optim.AdamW(ddp.parameters(), lr=a.lr)
    data = MarkovTokens(preset.vocab, a.seed)
    straggler = Straggler.parse(a.straggler) if a.straggler else None
    kills = [Kill.parse(k) for k in a.kill.split(",")] if a.kill else []
    cfg = ResilienceConfig(
        heartbeat_s=0.1,
        dead_after_s=a.dead_after,
        collective_timeout_s=a.collective_timeout_s,
        census_s=a.census_s,
        stall_s=60.0,
        recovery_s=a.recovery_s,
        min_members=a.min_members,
    )
    if a.hang_regroup:  # as a communicator that waits on the lost rank would
        import autoccl.resilience.group as group_module

        def never_returns(*_: object, **__: object) -> None:
            while True:
                time.sleep(1.0)

        group_module.survivors_group = never_returns  # type: ignore[assignment]
    if a.fail_admit == rank and not a.newcomer:
        import autoccl.resilience.reducer as reducer_module

        finish = reducer_module.Reducer._finish

        def fail_admitting_round(self: Reducer, work: object, s: int) -> None:
            finish(self, work, s)
            d = self._decision
            if d is not None and d.admit and d.round == s and not getattr(self, "_failed_once", False):
                self._failed_once = True  # type: ignore[attr-defined]
                raise reducer_module._Recover("injected: a collective of the admitting round failed here")

        reducer_module.Reducer._finish = fail_admitting_round  # type: ignore[method-assign]
    if a.newcomer and a.newcomer_dies:
        import autoccl.resilience.group as group_module

        group_module.direct = _die  # type: ignore[assignment]
    if a.dies_sending == rank and not a.newcomer:
        import autoccl.resilience.reducer as reducer_module

        reducer_module.send_state = _die  # type: ignore[assignment]
    if a.newcomer and a.newcomer_dies_asking:
        get = Reducer._get

        def dies_once_asked(self: Reducer, key: str, timeout_s: float) -> bytes | None:
            if key.startswith("join/admit/"):  # the request is posted: Reducer._ask waits for its admission
                _die()
            return get(self, key, timeout_s)

        Reducer._get = dies_once_asked  # type: ignore[method-assign]
    if a.newcomer:
        reducer = Reducer(ddp, a.steps, cfg, store=job_store, newcomer=Newcomer(rank, opt))
    else:
        reducer = Reducer(ddp, a.steps, cfg, store=job_store) if a.mode == "resilient" else None
    if reducer is not None and a.corrupt:
        bad_rank, bad_round = (int(x) for x in a.corrupt.split(":"))
        if rank == bad_rank:

            def corrupt(d: Decision) -> Decision:
                if d.round != bad_round:
                    return d
                flipped = tuple(r for r in d.members if r != d.members[-1])
                return Decision(d.round, d.kind, flipped, d.excused, d.waited_ms, d.budget_ms)

            reducer._test_corrupt_view = corrupt
    if reducer is not None and a.corrupt_admit:
        bad_rank, bad_round = (int(x) for x in a.corrupt_admit.split(":"))
        if rank == bad_rank:

            def admit_one(d: Decision) -> Decision:
                if d.round != bad_round:
                    return d
                return Decision(
                    d.round, d.kind, d.members, d.excused, d.waited_ms, d.budget_ms, admit={99: "x"}
                )

            reducer._test_corrupt_view = admit_one
    losses: dict[int, float] = {}
    done_at: dict[int, float] = {}  # step -> time its update was applied here (sync)
    undelayed: list[float] = []
    out: dict[str, Any] = {"rank": rank, "mode": a.mode}
    step = reducer.next_step if reducer is not None else 0
    try:
        while step < a.steps:
            if any(rank == k.rank and step == k.step for k in kills) and not a.newcomer:
                _die()
            t0 = time.perf_counter()
            g = torch.Generator().manual_seed(a.seed * 7919 + rank * 100_003 + step)
            tokens = data.batch(a.batch, a.seq + 1, g).to(device)
            logits = ddp(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, preset.vocab), tokens[:, 1:].reshape(-1))
            time.sleep(a.compute_ms / 1e3)  # the accelerator's share of the step
            f = straggler.factor(a.seed, step) if straggler and rank == straggler.rank else 1.0
            if f > 1.0 and step >= 5 and undelayed:
                delay((f - 1.0) * statistics.median(undelayed), busy=False)
            loss.backward()
            losses[step] = float(loss.detach())
            if reducer is None:
                opt.step()
                done_at[step] = time.monotonic()
                step += 1
                lagged = False
            else:
                rep = reducer.step(opt)
                step = reducer.next_step
                lagged = rep.lagged
            opt.zero_grad(set_to_none=True)
            if f == 1.0 and not lagged:
                undelayed.append(time.perf_counter() - t0)
    except ResilienceError as e:
        if reducer is not None:
            reducer.close()
        out["error"] = f"{type(e).__name__}: {e}"
        Path(a.out, f"rank{rank}.json").write_text(json.dumps(out))
        print(f"rank {rank}: {type(e).__name__}: {e}", file=sys.stderr)
        return 3
    if reducer is not None:
        reducer.close()
        out["records"] = [r.as_dict() for r in reducer.records]
        out["stats"] = reducer.stats()
        out["group"] = list(reducer.ranks)
        pg = reducer.process_group
    else:
        out["done_at"] = {str(k): v for k, v in done_at.items()}
        pg = None
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).cpu()
    out["digest"] = hashlib.sha256(flat.numpy().tobytes()).hexdigest()
    with torch.no_grad():
        ge = torch.Generator().manual_seed(a.seed + 999)
        ev = [
            float(F.cross_entropy(model(x[:, :-1]).reshape(-1, preset.vocab), x[:, 1:].reshape(-1)))
            for x in (data.batch(16, a.seq + 1, ge).to(device) for _ in range(4))
        ]
    out["eval_loss"] = sum(ev) / len(ev)
    out["losses"] = {str(k): v for k, v in losses.items()}
    Path(a.out, f"rank{rank}.json").write_text(json.dumps(out))
    if pg is None:
        dist.barrier()
    else:  # the reducer's group (made directly after a failure or a join: not registered)
        pg.barrier().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
