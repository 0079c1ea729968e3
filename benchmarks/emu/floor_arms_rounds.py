"""The step guard's floor arms (AUTOCCL_STEP_ARMS `+E`) in the emulator: per scenario, every guard round's
arms and medians, so that what raising the calls left exposed did to the step can be read beside the tuned
plan and the cap alone. DDP-like steps, two ranks in two processes over TCP, every task searched.

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/floor_arms_rounds.py \
    > benchmarks/results/cpu/step-arms-floor/rounds.md
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

from test_online import online_env
from test_step_arms import contention_model

from autoccl.emu import run
from autoccl.emu.model import PerfModel
from autoccl.emu.runner import DEFAULT_MODEL
from autoccl.emu.scenario import ddp_like

MIB = 1 << 20


def slowed_model(path: Path, comm_slow_per_ch: float) -> Path:
    """The calibrated model with a collective slowed per channel under load, a GEMM by channels alone."""
    m = PerfModel.load_file(DEFAULT_MODEL)
    m.load.update({"comm_slow_per_ch": comm_slow_per_ch, "gemm_base": 0.0, "gemm_per_ch": 4.0})
    m.save(path)
    return path


def rounds(model: Path, arms: str, buckets: tuple[int, ...], **scenario: Any) -> list[dict[str, Any]]:
    sc = ddp_like(bucket_bytes=buckets, seed=2, **scenario)
    env = online_env(True, AUTOCCL_MIN_TASK_US="0", AUTOCCL_MIN_TASK_US_TCP="0", AUTOCCL_STEP_ARMS=arms)
    res = run(sc, plugin="default", model=model, env=env, processes=True, timeout=300)
    return [t for t in res.trace if t.get("ev") == "guard"]


def main() -> int:
    tmp = Path(tempfile.mkdtemp())
    slow = {c: slowed_model(tmp / f"slow{c}.json", c) for c in (8.0, 30.0)}
    contention = contention_model(tmp / "contention.json")
    contention4 = contention_model(tmp / "contention4.json", per_channel=4.0)
    small_first = (6 * MIB, 25 * MIB, 25 * MIB, 25 * MIB)  # a small bucket, then three of 25 MiB
    large = (6 * MIB, 100 * MIB, 100 * MIB, 100 * MIB)
    short_step = {"steps": 400, "load": 1.0, "forward_us": 300.0, "backward_us": 600.0, "noise": False}
    long_backward = {"steps": 400, "load": 1.0, "forward_us": 500.0, "backward_us": 6000.0, "noise": False}
    light_load = {"steps": 400, "load": 0.35, "forward_us": 300.0, "backward_us": 900.0, "noise": False}
    cases: list[tuple[str, Path, str, tuple[int, ...], dict[str, Any]]] = [
        ("slow 30, load 1", slow[30.0], "hidden=2,2+max", small_first, short_step),
        ("slow 8, load 1", slow[8.0], "hidden=+max", large, long_backward),
        ("slow 8, load 1", slow[8.0], "hidden=4,4+max", large, long_backward),
        ("slow 30, load 1", slow[30.0], "hidden=+max", large, long_backward),
        ("slow 8, load 0.35", slow[8.0], "hidden=+max", small_first, light_load),
        ("slow 8, load 0.35", slow[8.0], "hidden=+max", (25 * MIB, 6 * MIB, 25 * MIB, 25 * MIB), light_load),
        (
            "contention, noise on",
            contention,
            "hidden=2,2+max",
            (100 * MIB, 100 * MIB, 100 * MIB, 6 * MIB),
            {"steps": 300, "load": 1.0},
        ),
        (
            "contention, noise on",
            contention,
            "hidden=2,2+max",
            (100 * MIB, 100 * MIB, 100 * MIB, 101 * MIB),
            {"steps": 300, "load": 1.0},
        ),
        (
            "contention x4, waited bucket",
            contention4,
            "estimated=4,4+max",
            (100 * MIB, 100 * MIB, 101 * MIB, 6 * MIB),
            {"steps": 700, "load": 1.0, "backward_us": 6000.0, "waited": (1,), "noise": False},
        ),
    ]
    print("| model | arms | buckets MiB | round | winner | arms' medians µs (changed calls) |")
    print("| --- | --- | --- | ---: | --- | --- |")
    for name, model, arms, buckets, scenario in cases:
        for i, g in enumerate(rounds(model, arms, buckets, **scenario)):
            medians = ", ".join(
                f"{a['arm']} {a['us']:.1f}" + (f" ({a['changed_calls']})" if "changed_calls" in a else "")
                for a in g.get("arms", [])
            )
            mib = ",".join(str(b // MIB) for b in buckets)
            print(f"| {name} | `{arms}` | {mib} | {i} | {g['winner']} | {medians} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
