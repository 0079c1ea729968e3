"""Training steps in the emulator with computation (docs/emulator.md, "Computation and training steps"):
plain NCCL, online tuning as `autoccl run` starts a job (without and with the step guard's arms,
AUTOCCL_STEP_ARMS), and fixed channel policies for the hidden and the exposed calls, over DDP-like and
FSDP-like steps, loads and seeds. Prints a markdown table of median step times (the second half of each run)
relative to plain NCCL, and writes the rows as JSON.

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/step_policies.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

from test_online import online_env

from autoccl.emu import run
from autoccl.emu.scenario import ddp_like, fsdp_like

# As `autoccl run` starts a job on a machine whose plain communicators have 24 channels.
RAISED = {"NCCL_MIN_CTAS": "64", "AUTOCCL_NCCL_CHANNELS": "24"}
MODES: dict[str, dict[str, str] | None] = {
    "plain": None,
    "online": online_env(False, **RAISED),
    "online, arms hidden=2,8": online_env(False, **RAISED, AUTOCCL_STEP_ARMS="hidden=2,8"),
    "hidden 8, exposed 64": {
        **online_env(False, **RAISED),
        "AUTOCCL_MODE": "manual",
        "AUTOCCL_MANUAL_CHANNELS": "8,64",
    },
    "hidden 24, exposed 64": {
        **online_env(False, **RAISED),
        "AUTOCCL_MODE": "manual",
        "AUTOCCL_MANUAL_CHANNELS": "24,64",
    },
    "64 everywhere": {
        **online_env(False, **RAISED),
        "AUTOCCL_MODE": "manual",
        "AUTOCCL_MANUAL_CHANNELS": "64,64",
    },
}


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    rows: list[dict[str, Any]] = []
    for shape, build, steps in (("ddp", ddp_like, 300), ("fsdp", fsdp_like, 160)):
        for load in (0.35, 1.0):
            for seed in (1, 2, 3):
                sc = build(steps=steps, load=load, seed=seed)
                for mode, env in MODES.items():
                    res = run(sc, plugin=None if env is None else "default", env=env or {}, timeout=300)
                    if res.returncode != 0 or res.divergences:
                        raise SystemExit(
                            f"{shape} load {load} seed {seed} {mode}: failed\n{res.stderr[-2000:]}"
                        )
                    times = res.step_ms(0)
                    rows.append(
                        {
                            "shape": shape,
                            "load": load,
                            "seed": seed,
                            "mode": mode,
                            "steps": len(times) + 1,
                            "median_step_ms": statistics.median(times[len(times) // 2 :]),
                        }
                    )
                    print(
                        f"{shape} load={load} seed={seed} {mode}: {rows[-1]['median_step_ms']:.4f} ms",
                        flush=True,
                    )
    if out is not None:
        out.write_text(json.dumps(rows, indent=1) + "\n")
    plain = {(r["shape"], r["load"], r["seed"]): r["median_step_ms"] for r in rows if r["mode"] == "plain"}
    print("\n| step | load | plain (ms, seeds 1-3) | " + " | ".join(m for m in MODES if m != "plain") + " |")
    print("| --- | ---: | ---: |" + " ---: |" * (len(MODES) - 1))
    for shape in ("ddp", "fsdp"):
        for load in (0.35, 1.0):
            base = [plain[(shape, load, s)] for s in (1, 2, 3)]
            cells = []
            for mode in MODES:
                if mode == "plain":
                    continue
                # step-time ratio plain / mode: > 1 is faster than NCCL; min-max over the seeds
                ratios = [
                    plain[(r["shape"], r["load"], r["seed"])] / r["median_step_ms"]
                    for r in rows
                    if r["mode"] == mode and r["shape"] == shape and r["load"] == load
                ]
                cells.append(f"{statistics.median(ratios):.4f}× ({min(ratios):.4f}–{max(ratios):.4f})")
            lo, hi = min(base), max(base)
            print(f"| {shape} | {load} | {lo:.3f}–{hi:.3f} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
