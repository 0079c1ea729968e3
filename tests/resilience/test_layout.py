"""The group's bucket layout: its JSON form in an admission record, and a newcomer's copies from DDP's
buckets (laid out otherwise) into the group's and back."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from autoccl.resilience.layout import BucketLayout, Remap, decode, encode  # noqa: E402


def _params() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(n) for n in (3, 5, 2, 4)]


def _group_layout(params: list[torch.Tensor]) -> list[BucketLayout]:
    # bucket 0: parameters 3 and 1; bucket 1: parameters 0 and 2 (as DDP orders by readiness)
    return [
        BucketLayout(9, torch.float32, [(params[3], 0, 4), (params[1], 4, 5)]),
        BucketLayout(5, torch.float32, [(params[0], 0, 3), (params[2], 3, 2)]),
    ]


def test_layout_round_trips_through_json() -> None:
    params = _params()
    index = {id(p): i for i, p in enumerate(params)}
    doc = json.loads(json.dumps(encode(_group_layout(params), index)))
    assert doc == [["float32", 9, [[3, 0, 4], [1, 4, 5]]], ["float32", 5, [[0, 0, 3], [2, 3, 2]]]]
    back = decode(doc, params)
    assert [(b.numel, b.dtype, [(id(p), o, n) for p, o, n in b.params]) for b in back] == [
        (b.numel, b.dtype, [(id(p), o, n) for p, o, n in b.params]) for b in _group_layout(params)
    ]


def test_unknown_dtype_in_a_layout_is_refused() -> None:
    from autoccl.resilience.config import ResilienceError

    with pytest.raises(ResilienceError, match="unknown tensor type 'float99'"):
        decode([["float99", 3, [[0, 0, 3]]]], _params())


def test_remap_copies_ddp_buckets_into_the_groups_and_back() -> None:
    params = _params()
    index = {id(p): i for i, p in enumerate(params)}
    remap = Remap(_group_layout(params), index)
    # the newcomer's DDP: one bucket in module order
    flat = torch.cat(params)
    ddp = {0: (flat, [(0, 0, 3), (1, 3, 5), (2, 8, 2), (3, 10, 4)])}
    assert not remap.same_as(ddp)
    group = remap.to_group(ddp, torch.device("cpu"))
    assert torch.equal(group[0], torch.cat([params[3], params[1]]))
    assert torch.equal(group[1], torch.cat([params[0], params[2]]))
    results = [g * 2 for g in group]  # what the round returns
    out = remap.from_group(results, flat, ddp[0][1])
    assert torch.equal(out, flat * 2)
    same = {0: (group[0], remap.parts[0]), 1: (group[1], remap.parts[1])}
    assert remap.same_as(same)
