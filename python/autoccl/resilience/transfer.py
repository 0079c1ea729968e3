"""What a newcomer receives from a member when it joins: the model's parameters and buffers, and the
optimizer's state, sent point to point over the grown group (autoccl.resilience.group send/recv).

The order is fixed by the module (parameters, then buffers, in `module.parameters()` / `buffers()`
order, the same code on both ends). The optimizer's `state_dict` goes as its structure, `torch.save`d
with every tensor replaced by a placeholder (its index, shape, dtype and device kind) and loaded with
`weights_only=True`, then its tensors one by one on the group's device; the newcomer loads it into its
own optimizer, built as the members built theirs."""

from __future__ import annotations

import io
from typing import Any

import torch

from autoccl.resilience import group as G
from autoccl.resilience.config import ResilienceError

_TENSOR = "autoccl-tensor"  # a tensor's place in the state_dict's structure


def dtype_named(name: str) -> torch.dtype:
    """torch.float32 from "float32" (as `str(dtype)` writes it, without "torch.")."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ResilienceError(f"unknown tensor type {name!r} in the group's state")
    return dtype


def _model_tensors(module: torch.nn.Module) -> list[torch.Tensor]:
    return [t.data for t in (*module.parameters(), *module.buffers())]


def _is_hole(x: Any) -> bool:
    return isinstance(x, tuple) and len(x) == 5 and x[0] == _TENSOR


def send_state(
    group: G.Group, to: int, module: torch.nn.Module, optimizer: torch.optim.Optimizer, device: torch.device
) -> None:
    for t in _model_tensors(module):
        G.send(group, t, to)
    tensors: list[torch.Tensor] = []

    def strip(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            tensors.append(x)
            kind = x.device.type
            return (_TENSOR, len(tensors) - 1, list(x.shape), str(x.dtype).removeprefix("torch."), kind)
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return type(x)(strip(v) for v in x)
        return x

    blob = io.BytesIO()
    torch.save(strip(optimizer.state_dict()), blob)
    raw = torch.frombuffer(bytearray(blob.getvalue()), dtype=torch.uint8)
    G.send(group, torch.tensor([raw.numel()], dtype=torch.int64, device=device), to)
    G.send(group, raw.to(device), to)
    for t in tensors:
        G.send(group, t.detach().to(device), to)


def receive_state(
    group: G.Group,
    source: int,
    module: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    device: torch.device,
) -> None:
    """Into the module's tensors in place, and into the optimizer (load_state_dict)."""
    for t in _model_tensors(module):
        G.recv(group, t, source)
    size = torch.zeros(1, dtype=torch.int64, device=device)
    G.recv(group, size, source)
    raw = torch.empty(int(size.item()), dtype=torch.uint8, device=device)
    G.recv(group, raw, source)
    skeleton = torch.load(io.BytesIO(raw.cpu().numpy().tobytes()), weights_only=True)
    holes: list[tuple[Any, ...]] = []

    def find(x: Any) -> None:
        if _is_hole(x):
            holes.append(x)
        elif isinstance(x, dict):
            for v in x.values():
                find(v)
        elif isinstance(x, list | tuple):
            for v in x:
                find(v)

    find(skeleton)
    got: dict[int, torch.Tensor] = {}
    for _, i, shape, dtype, kind in sorted(holes, key=lambda h: int(h[1])):
        t = torch.empty(shape, dtype=dtype_named(dtype), device=device)
        G.recv(group, t, source)
        got[int(i)] = t.cpu() if kind == "cpu" else t

    def fill(x: Any) -> Any:
        if _is_hole(x):
            return got[int(x[1])]
        if isinstance(x, dict):
            return {k: fill(v) for k, v in x.items()}
        if isinstance(x, list | tuple):
            return type(x)(fill(v) for v in x)
        return x

    optimizer.load_state_dict(fill(skeleton))
