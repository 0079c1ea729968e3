"""Adaptive collectives: measure the machine, synthesize from it, run the schedule (docs/adaptive.md).

    from autoccl.adaptive import Plan, all_reduce
    plan = Plan.load("allreduce.json")        # a schedule `autoccl synth -o` wrote
    all_reduce(tensor, plan)                   # over torch.distributed point-to-point operations

Names are imported on first use, so that `import autoccl.adaptive` (the command line) needs no torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Plan": "autoccl.adaptive.plan",
    "PlanError": "autoccl.adaptive.plan",
    "all_gather": "autoccl.adaptive.collectives",
    "all_gather_into_tensor": "autoccl.adaptive.collectives",
    "all_reduce": "autoccl.adaptive.collectives",
    "broadcast": "autoccl.adaptive.collectives",
    "reduce": "autoccl.adaptive.collectives",
    "reduce_scatter": "autoccl.adaptive.collectives",
    "reduce_scatter_tensor": "autoccl.adaptive.collectives",
    "Adaptive": "autoccl.adaptive.runtime",
    "ddp_comm_hook": "autoccl.adaptive.runtime",
    "EmulatedTransport": "autoccl.adaptive.transport",
    "LinkModel": "autoccl.adaptive.transport",
    "TorchTransport": "autoccl.adaptive.transport",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'autoccl.adaptive' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
