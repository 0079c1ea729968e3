"""Collectives executed from plans, with torch.distributed's signatures and semantics:

    all_reduce(tensor, plan, op=SUM)                      in place
    all_gather_into_tensor(output, input, plan)           output = concat of every rank's input
    all_gather(output_list, input, plan)                  per-rank sizes may differ
    reduce_scatter_tensor(output, input, plan, op=SUM)    input = nranks equal parts
    reduce_scatter(output, input_list, plan, op=SUM)      per-rank sizes may differ
    broadcast(tensor, plan, src=None)                     from the plan's root
    reduce(tensor, plan, dst=None, op=SUM)                to the plan's root; other ranks' tensors unchanged

`group` is the job's process group (None: the default group); plan ranks are ranks of that group. As in
torch.distributed, `src` and `dst` are global ranks and `group_src` and `group_dst` ranks of `group`; either
must be the plan's root (None: the plan's root). Tensors need not be contiguous (a contiguous copy is
reduced or gathered and written back). `transport` replaces the point-to-point layer (e.g. an
EmulatedTransport).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from autoccl.adaptive.executor import RunStats, run_program
from autoccl.adaptive.plan import Plan, PlanError, owned_chunks, split_sizes
from autoccl.adaptive.reduce_ops import Reduction, resolve
from autoccl.adaptive.transport import TorchTransport, Transport

SUM = dist.ReduceOp.SUM


def native_all_gather(output: torch.Tensor, input: torch.Tensor, group: Any = None) -> Any:
    """The backend's own All-Gather into one tensor: `all_gather_single` where torch has it (newer releases
    deprecate `all_gather_into_tensor`, with a warning per call), else `all_gather_into_tensor`."""
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    return gather(output, input, group=group)


def native_reduce_scatter(output: torch.Tensor, input: torch.Tensor, op: Any = SUM, group: Any = None) -> Any:
    """The backend's own Reduce-Scatter from one tensor: `reduce_scatter_single` where torch has it, else
    `reduce_scatter_tensor` (deprecated in newer releases, as for the gather)."""
    scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    return scatter(output, input, op, group=group)


def _transport(group: Any, transport: Transport | None) -> Transport:
    return transport if transport is not None else TorchTransport(group)


def _check(plan: Plan, collective: str, t: Transport) -> None:
    if plan.collective != collective:
        raise PlanError(
            f"the plan is for {plan.collective}, not {collective}: make one with `autoccl synth -c "
            f"{collective}` or Plan.from_schedule(synth.synthesize(topology, {collective!r}, size))"
        )
    if plan.nranks != t.size:
        raise PlanError(f"the plan is for {plan.nranks} ranks but the process group has {t.size}")


def _flat(t: torch.Tensor, what: str) -> torch.Tensor:
    """t as one dimension: a view, or for a non-contiguous t a contiguous copy (see _write_back)."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{what} must be a torch.Tensor, got {type(t).__name__}")
    return t.view(-1) if t.is_contiguous() else t.contiguous().view(-1)


def _write_back(t: torch.Tensor, flat: torch.Tensor) -> None:
    """Give a non-contiguous t the result computed in its contiguous copy `flat` (from _flat)."""
    if not t.is_contiguous():
        t.copy_(flat.view(t.shape))


def _root(plan: Plan, group: Any, given: int | None, group_given: int | None, what: str) -> None:
    """Check a caller's root (`src`/`dst`: a global rank; `group_src`/`group_dst`: a rank of `group`, as in
    torch.distributed) against the plan's root, a rank of the group."""
    if given is not None and group_given is not None:
        raise ValueError(f"give {what} or group_{what}, not both")
    shown = f"{what}={given}"
    if given is not None:
        if group is None:
            group_given = given
        else:
            try:
                group_given = dist.get_group_rank(group, given)
            except (RuntimeError, ValueError):
                raise PlanError(
                    f"{what}={given} is not a global rank of the process group: give a member's global rank, "
                    f"or its rank in the group as group_{what}"
                ) from None
            shown = f"{what}={given} (group rank {group_given})"
    elif group_given is not None:
        shown = f"group_{what}={group_given}"
    if group_given is not None and group_given != plan.root:
        raise PlanError(
            f"the plan's {plan.collective} root is group rank {plan.root}, not {shown}: "
            f"synthesize one with root={group_given}"
        )


def _pieces(flat: torch.Tensor, n: int) -> list[torch.Tensor]:
    out, off = [], 0
    for k in split_sizes(flat.numel(), n):
        out.append(flat[off : off + k])
        off += k
    return out


def _same_dtype(out: torch.Tensor, inp: torch.Tensor) -> None:
    if out.dtype != inp.dtype:
        raise TypeError(f"output dtype {out.dtype} differs from input dtype {inp.dtype}")


def _rank_parts(whole: torch.Tensor, what: str, part: int, size: int) -> list[torch.Tensor]:
    """`whole` as `size` consecutive views of `part` elements, one a rank (the *_tensor layout)."""
    if whole.numel() != part * size:
        raise ValueError(f"{what} must hold {size} x {part} elements, it holds {whole.numel()}")
    return [whole[r * part : (r + 1) * part] for r in range(size)]


def _segment_views(plan: Plan, segments: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Chunk views when rank r's owned chunks (ascending) split segment r."""
    views: list[torch.Tensor | None] = [None] * plan.nchunks
    for r, chunks in enumerate(owned_chunks(plan)):
        for c, piece in zip(chunks, _pieces(segments[r], len(chunks)), strict=True):
            views[c] = piece
    assert all(v is not None for v in views)
    return views  # type: ignore[return-value]


def all_reduce(
    tensor: torch.Tensor,
    plan: Plan,
    op: Any = SUM,
    group: Any = None,
    transport: Transport | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "allreduce", t)
    flat = _flat(tensor, "tensor")
    red = resolve(op, tensor.dtype)
    red.prepare(flat)
    stats = run_program(plan, t.rank, _pieces(flat, plan.nchunks), t, red)
    red.finish(flat, plan.nranks)
    _write_back(tensor, flat)
    return stats


def _gather(plan: Plan, segments: list[torch.Tensor], inp: torch.Tensor, t: Transport) -> RunStats:
    mine = segments[t.rank]
    if mine.numel() != inp.numel():
        raise ValueError(f"rank {t.rank}'s input has {inp.numel()} elements, its output part {mine.numel()}")
    if mine.data_ptr() != inp.data_ptr():
        mine.copy_(inp)
    return run_program(plan, t.rank, _segment_views(plan, segments), t)


def all_gather_into_tensor(
    output: torch.Tensor,
    input: torch.Tensor,
    plan: Plan,
    group: Any = None,
    transport: Transport | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "allgather", t)
    out, inp = _flat(output, "output"), _flat(input, "input")
    _same_dtype(out, inp)
    stats = _gather(plan, _rank_parts(out, "output", inp.numel(), t.size), inp, t)
    _write_back(output, out)
    return stats


def all_gather(
    output_list: Sequence[torch.Tensor],
    input: torch.Tensor,
    plan: Plan,
    group: Any = None,
    transport: Transport | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "allgather", t)
    if len(output_list) != t.size:
        raise ValueError(f"output_list needs {t.size} tensors, got {len(output_list)}")
    segs = [_flat(o, f"output_list[{r}]") for r, o in enumerate(output_list)]
    inp = _flat(input, "input")
    if any(s.dtype != inp.dtype for s in segs):
        raise TypeError("every output tensor must have the input's dtype")
    stats = _gather(plan, segs, inp, t)
    for o, seg in zip(output_list, segs, strict=True):
        _write_back(o, seg)
    return stats


def _scatter(
    plan: Plan, work_segments: list[torch.Tensor], out: torch.Tensor, red: Reduction, t: Transport
) -> RunStats:
    for s in work_segments:
        red.prepare(s)
    stats = run_program(plan, t.rank, _segment_views(plan, work_segments), t, red)
    out.copy_(work_segments[t.rank])
    red.finish(out, plan.nranks)
    return stats


def reduce_scatter_tensor(
    output: torch.Tensor,
    input: torch.Tensor,
    plan: Plan,
    op: Any = SUM,
    group: Any = None,
    transport: Transport | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "reducescatter", t)
    out, inp = _flat(output, "output"), _flat(input, "input")
    _same_dtype(out, inp)
    work = _rank_parts(inp.clone(), "input", out.numel(), t.size)  # reduced in place: a copy
    stats = _scatter(plan, work, out, resolve(op, out.dtype), t)
    _write_back(output, out)
    return stats


def reduce_scatter(
    output: torch.Tensor,
    input_list: Sequence[torch.Tensor],
    plan: Plan,
    op: Any = SUM,
    group: Any = None,
    transport: Transport | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "reducescatter", t)
    if len(input_list) != t.size:
        raise ValueError(f"input_list needs {t.size} tensors, got {len(input_list)}")
    out = _flat(output, "output")
    ins = [_flat(x, f"input_list[{r}]") for r, x in enumerate(input_list)]
    if any(x.dtype != out.dtype for x in ins):
        raise TypeError("every input tensor must have the output's dtype")
    if ins[t.rank].numel() != out.numel():
        raise ValueError(f"input_list[{t.rank}] has {ins[t.rank].numel()} elements, output {out.numel()}")
    red = resolve(op, out.dtype)
    work = torch.cat(ins) if ins else out.new_empty(0)
    segs, off = [], 0
    for x in ins:
        segs.append(work[off : off + x.numel()])
        off += x.numel()
    stats = _scatter(plan, segs, out, red, t)
    _write_back(output, out)
    return stats


def broadcast(
    tensor: torch.Tensor,
    plan: Plan,
    src: int | None = None,
    group: Any = None,
    transport: Transport | None = None,
    group_src: int | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "broadcast", t)
    _root(plan, group, src, group_src, "src")
    flat = _flat(tensor, "tensor")
    stats = run_program(plan, t.rank, _pieces(flat, plan.nchunks), t)
    _write_back(tensor, flat)
    return stats


def reduce(
    tensor: torch.Tensor,
    plan: Plan,
    dst: int | None = None,
    op: Any = SUM,
    group: Any = None,
    transport: Transport | None = None,
    group_dst: int | None = None,
) -> RunStats:
    t = _transport(group, transport)
    _check(plan, "reduce", t)
    _root(plan, group, dst, group_dst, "dst")
    flat = _flat(tensor, "tensor")
    red = resolve(op, tensor.dtype)
    work = flat if t.rank == plan.root else flat.clone()
    red.prepare(work)
    stats = run_program(plan, t.rank, _pieces(work, plan.nchunks), t, red)
    if t.rank == plan.root:
        red.finish(work, plan.nranks)
        _write_back(tensor, work)
    return stats
