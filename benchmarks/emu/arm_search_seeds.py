"""The per-task search inside the step guard's winning channel cap (AUTOCCL_ARM_SEARCH on against off) in
the emulator's DDP-like step of tests/emu/test_step_arms.py (three hidden 100 MiB all_reduce buckets and an
exposed 6 MiB one, two ranks in separate processes over TCP, 400 steps), over scenario seeds, the settings
interleaved per seed (off twice: its own spread). Two models: the contention model with `hidden=2` (no pair
beats NCCL's at the cap: what the search costs), and the same with ring/LL128 faster than ring/Simple on 1
channel, `hidden=1` (what it finds).

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/arm_search_seeds.py \\
    --seeds 1-24 --clock kernel > benchmarks/results/cpu/arm-search/seeds-kernel-clock.md
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from seed_range import seeds
from test_online import online_env
from test_step_arms import BUCKETS, authority_tasks, contention_model, ll128_at_few_channels_model, pins_of

from autoccl.emu import run
from autoccl.emu.scenario import ddp_like

STEPS = 400
LAST = 100  # steps compared at the end: past the verdict and the search within the cap


def one(plugin: Path, model: Path, arms: str, seed: int, arm_search: str, clock: str) -> dict[str, Any]:
    sc = ddp_like(steps=STEPS, load=1.0, bucket_bytes=BUCKETS, seed=seed)
    env = online_env(
        True,
        AUTOCCL_MIN_TASK_US="0",
        AUTOCCL_MIN_TASK_US_TCP="0",
        AUTOCCL_STEP_ARMS=arms,
        AUTOCCL_ARM_SEARCH=arm_search,
    )
    extra = ["--verbose"] + (["--launch-clock"] if clock == "launch" else [])
    res = run(sc, plugin=plugin, model=model, env=env, processes=True, timeout=300, extra_args=extra)
    steps = res.step_ms(0)
    hidden = authority_tasks(res, BUCKETS[0])[0]
    verdicts = [ln for ln in res.stderr.splitlines() if "step guard:" in ln]
    pins = pins_of(res, BUCKETS[0])
    return {
        "last_ms": statistics.median(steps[-LAST:]),
        "job_ms": sum(steps),
        "capped": bool(verdicts) and "hidden calls at most" in verdicts[-1],
        "retunes": int(hidden.get("search_cap_retunes") or 0),
        "converged_at": hidden.get("converged_at"),
        "pin": pins[-1] if pins else "-",
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=seeds, default=seeds("1-8"))
    ap.add_argument(
        "--clock",
        choices=("kernel", "launch"),
        default="kernel",
        help="the plugin's clock: the emulator's default (kernel), or the GPU's (launch)",
    )
    a = ap.parse_args()
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        models = {
            "contention, hidden=2": (contention_model(folder / "contention.json"), "hidden=2"),
            "LL128 faster on 1 channel, hidden=1": (ll128_at_few_channels_model(folder), "hidden=1"),
        }
        print(
            "| model, arms | seed | AUTOCCL_ARM_SEARCH | cap arm won | re-tunes | re-tune ended at call "
            "| hidden task's last pin | median of the last 100 steps ms | job ms |"
        )
        print("| --- | ---: | --- | --- | ---: | ---: | --- | ---: | ---: |")
        table: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for name, (model, arms) in models.items():
            for seed in a.seeds:
                for setting in ("on", "off", "off again"):  # interleaved per seed; off twice: its own spread
                    r = one(plugin, model, arms, seed, setting.split()[0], a.clock)
                    table.setdefault((name, setting), []).append(r)
                    print(
                        f"| {name} | {seed} | {setting} | {'yes' if r['capped'] else 'no'} | {r['retunes']} "
                        f"| {r['converged_at'] if r['retunes'] else '-'} | {r['pin']} | {r['last_ms']:.3f} "
                        f"| {r['job_ms']:.0f} |",
                        flush=True,
                    )
        print()
        print(
            "| model, arms | seeds | last 100 steps, on / off (median of the per-seed ratios, range) "
            "| off again / off | job, on / off | off again / off "
            "| searches within the cap that pinned a pair of their own |"
        )
        print("| --- | ---: | --- | --- | --- | --- | --- |")

        def ratios(a: list[dict[str, Any]], b: list[dict[str, Any]], key: str) -> str:
            r = [x[key] / y[key] for x, y in zip(a, b, strict=True)]
            return f"{statistics.median(r):.4f} ({min(r):.4f}–{max(r):.4f})"

        for name in models:
            on, off, again = (table[(name, s)] for s in ("on", "off", "off again"))
            own = sum(1 for x in on if x["retunes"] and not x["pin"].startswith("NCCL"))
            print(
                f"| {name} | {len(on)} | {ratios(on, off, 'last_ms')} | {ratios(again, off, 'last_ms')} "
                f"| {ratios(on, off, 'job_ms')} | {ratios(again, off, 'job_ms')} "
                f"| {own} of {sum(1 for x in on if x['retunes'])} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
