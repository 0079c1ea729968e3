"""The group's gradient buckets: which parameters each flat bucket holds, and where.

The reducer all-reduces buckets by index, so every rank's bucket j must hold the same parameters at the
same offsets. The members take the layout DDP settled on in warm-up; a newcomer receives it in its
admission record (`encode` / `decode`, parameters named by their index in `module.parameters()`). Its
own DDP lays out its first step's buckets before it has rebuilt them in the order gradients become
ready, so until they match the group's, `Remap` copies its gradients into the group's layout and the
round's results back into DDP's buckets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from autoccl.resilience.transfer import dtype_named

Part = tuple[int, int, int]  # (parameter index, offset in the flat bucket, numel)


@dataclass
class BucketLayout:
    numel: int
    dtype: torch.dtype
    params: list[tuple[torch.Tensor, int, int]]  # (parameter, offset, numel) in the flat bucket


def placed(bucket: dist.GradBucket) -> list[tuple[torch.Tensor, int, int]]:
    """A DDP bucket's parameters as (parameter, offset, numel) in its flat buffer."""
    out, off = [], 0
    for p, g in zip(bucket.parameters(), bucket.gradients(), strict=True):
        out.append((p, off, g.numel()))
        off += g.numel()
    return out


def encode(layout: Sequence[BucketLayout], index: Mapping[int, int]) -> list[list[Any]]:
    """The layout as JSON: [dtype name, numel, [[parameter index, offset, numel], ...]] per bucket;
    `index` maps id(parameter) to its index in module.parameters()."""
    return [
        [str(lay.dtype).removeprefix("torch."), lay.numel, [[index[id(p)], o, n] for p, o, n in lay.params]]
        for lay in layout
    ]


def decode(doc: Sequence[Sequence[Any]], params: Sequence[torch.Tensor]) -> list[BucketLayout]:
    """The layout `encode` wrote, over this process's parameters (the same module, in the same order)."""
    return [
        BucketLayout(
            int(numel), dtype_named(str(dtype)), [(params[int(i)], int(o), int(n)) for i, o, n in parts]
        )
        for dtype, numel, parts in doc
    ]


class Remap:
    """Copies between a newcomer's DDP buckets and the group's layout. DDP's buckets of one step are
    given as bucket index -> (its flat buffer, its parts)."""

    def __init__(self, layout: Sequence[BucketLayout], index: Mapping[int, int]) -> None:
        self.layout = list(layout)
        self.parts: list[list[Part]] = [[(index[id(p)], o, n) for p, o, n in lay.params] for lay in layout]
        self.where = {i: (j, o) for j, parts in enumerate(self.parts) for i, o, _ in parts}

    def same_as(self, ddp: Mapping[int, tuple[torch.Tensor, list[Part]]]) -> bool:
        """Whether DDP's buckets are the group's, bucket for bucket."""
        return [ddp[b][1] for b in sorted(ddp)] == self.parts

    def to_group(
        self, ddp: Mapping[int, tuple[torch.Tensor, list[Part]]], device: torch.device
    ) -> list[torch.Tensor]:
        """The group's buckets, filled from DDP's (every parameter of the group's layout must be in one)."""
        src = {i: (b, o) for b, (_, parts) in ddp.items() for i, o, _ in parts}
        out = []
        for lay, parts in zip(self.layout, self.parts, strict=True):
            buf = torch.empty(lay.numel, dtype=lay.dtype, device=device)
            for i, o, n in parts:
                b, at = src[i]
                buf[o : o + n].copy_(ddp[b][0][at : at + n])
            out.append(buf)
        return out

    def from_group(
        self, results: Sequence[torch.Tensor], like: torch.Tensor, parts: list[Part]
    ) -> torch.Tensor:
        """One DDP bucket (shaped as `like`, holding `parts`) filled from the group's result buckets."""
        out = torch.zeros_like(like)
        for i, o, n in parts:
            j, at = self.where[i]
            out[o : o + n].copy_(results[j][at : at + n])
        return out
