"""A group of one rank (a one-GPU job, or the last survivor): each round waits for its own gradient."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

from autoccl.resilience import ResilienceConfig  # noqa: E402
from autoccl.resilience.reducer import Reducer  # noqa: E402


def test_one_rank_trains() -> None:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        ddp = DDP(model, bucket_cap_mb=0.0005)  # several buckets
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        red = Reducer(ddp, 40, ResilienceConfig(heartbeat_s=0.05, dead_after_s=1.0))
        x = torch.randn(64, 8)
        y = x.sum(dim=1, keepdim=True)
        losses = []
        while red.next_step < 40:
            loss = F.mse_loss(ddp(x), y)
            loss.backward()
            red.step(opt)
            opt.zero_grad(set_to_none=True)
            losses.append(float(loss.detach()))
        red.close()
        assert red.stats()["rounds"] == 40 and losses[-1] < 0.5 * losses[0]
    finally:
        dist.destroy_process_group()
