"""A newcomer receives the weights, buffers and optimizer state of a member: after the transfer one more
step on the same gradient gives both the same weights, bit for bit."""

from __future__ import annotations

import threading
from typing import Any

import pytest

torch = pytest.importorskip("torch")

import torch.distributed as dist  # noqa: E402

from autoccl.resilience import group as G  # noqa: E402
from autoccl.resilience.transfer import receive_state, send_state  # noqa: E402


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.BatchNorm1d(5), torch.nn.Linear(5, 2))
    return m


def _step(m: torch.nn.Module, opt: torch.optim.Optimizer, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 6, generator=g)
    m(x).square().sum().backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def test_newcomer_takes_the_members_state() -> None:
    store = dist.HashStore()
    member, newcomer = _model(1), _model(2)
    opt_m = torch.optim.AdamW(member.parameters(), lr=0.05, betas=(0.8, 0.95))
    opt_n = torch.optim.AdamW(newcomer.parameters(), lr=0.05, betas=(0.8, 0.95))
    for i in range(3):  # state to carry: moments, step counts, BatchNorm's running statistics
        _step(member, opt_m, i)
    opt_m.param_groups[0]["lr"] = 0.01  # as a scheduler would have set it
    errors: list[BaseException] = []

    def run(rank: int, fn: Any) -> None:
        try:
            grp = G.direct("gloo", dist.PrefixStore("t", store), (3, 5), rank, 20.0, "grown")
            fn(grp)
            G.release(grp)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [
        threading.Thread(
            target=run, args=(3, lambda g: send_state(g, 5, member, opt_m, torch.device("cpu")))
        ),
        threading.Thread(
            target=run, args=(5, lambda g: receive_state(g, 3, newcomer, opt_n, torch.device("cpu")))
        ),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    assert opt_n.param_groups[0]["lr"] == 0.01 and opt_n.param_groups[0]["betas"] == (0.8, 0.95)
    for a, b in zip(member.state_dict().values(), newcomer.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    _step(member, opt_m, 9)
    _step(newcomer, opt_n, 9)
    for a, b in zip(member.parameters(), newcomer.parameters(), strict=True):
        assert torch.equal(a, b), "one more step on the same gradient gave other weights"
