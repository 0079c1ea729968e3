"""The step guard's estimated arms (AUTOCCL_STEP_ARMS=estimated=C) against the arm that caps every call but
the step's last (hidden=C), in the emulator: DDP-like steps of four buckets whose second is waited for by the
chunk after it (an exposed call mid-step), two ranks in separate processes over the TCP coordinator, the
emulator's noise on. Two contention laws: one where a hidden call's channels slow the computation more than
they speed the call (tests/emu/test_step_arms.py's, paths at 4x the per-channel bandwidth), and the calibrated
one (no gain from caps). Each seed runs twice (the TCP board's timing moves what the searches and the guard
see). Prints a markdown table of the median step (the last 100 of 700) relative to plain NCCL and what the
last guard verdict kept; writes the rows as JSON.

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/estimated_arms.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

from test_online import online_env
from test_step_arms import WAITED_BUCKETS, contention_model

from autoccl.emu import run
from autoccl.emu.scenario import ddp_like

STEPS, LAST, CAP = 700, 100, 4
SEEDS, REPEATS = (1, 2, 3, 4, 5), 2
ARMS = {"online": "off", f"hidden={CAP}": f"hidden={CAP}", f"estimated={CAP}": f"estimated={CAP}"}


def one(model: str, mode: str, seed: int) -> dict[str, Any]:
    sc = ddp_like(
        steps=STEPS, load=1.0, bucket_bytes=WAITED_BUCKETS, backward_us=6000.0, waited=(1,), seed=seed
    )
    env = None
    if mode != "plain":
        env = online_env(
            True, AUTOCCL_MIN_TASK_US="0", AUTOCCL_MIN_TASK_US_TCP="0", AUTOCCL_STEP_ARMS=ARMS[mode]
        )
    res = run(
        sc, plugin=None if env is None else "default", model=model, env=env or {}, processes=True, timeout=600
    )
    if any(c != 0 for c in res.returncodes) or res.divergences:
        raise SystemExit(f"{mode} seed {seed}: failed\n{res.stderr[-2000:]}")
    guard = [t for t in res.trace if t.get("ev") == "guard"]
    last = guard[-1] if guard else {}
    kept = str(last.get("winner", "-"))
    if last.get("winner_positions"):
        kept += " " + ",".join(str(p) for p in last["winner_positions"])
    return {
        "mode": mode,
        "seed": seed,
        "median_step_ms": statistics.median(res.step_ms(0)[-LAST:]),
        "kept": kept,
        "verdicts": len(guard),
    }


def main() -> int:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else None
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            "caps pay (paths 4x per channel, GEMM slowed by channels)": str(
                contention_model(Path(tmp) / "contention.json", per_channel=4.0)
            ),
            "calibrated": "default",
        }
        for law, model in models.items():
            for seed in SEEDS:
                for rep in range(REPEATS):
                    for mode in ("plain", *ARMS):
                        if mode == "plain" and rep > 0:
                            continue  # plain NCCL runs the same every time (no board, no tuning)
                        r = {"law": law, "repeat": rep, **one(model, mode, seed)}
                        rows.append(r)
                        print(
                            f"{law[:12]} seed {seed} rep {rep} {mode}: {r['median_step_ms']:.4f} ms, "
                            f"kept {r['kept']}",
                            flush=True,
                        )
    if out is not None:
        out.write_text(json.dumps(rows, indent=1) + "\n")
    print("\n| contention law | mode | step vs plain, median (min–max) over runs | last verdict kept |")
    print("| --- | --- | ---: | --- |")
    for law in dict.fromkeys(r["law"] for r in rows):
        plain = {r["seed"]: r["median_step_ms"] for r in rows if r["law"] == law and r["mode"] == "plain"}
        for mode in ARMS:
            these = [r for r in rows if r["law"] == law and r["mode"] == mode]
            ratios = [plain[r["seed"]] / r["median_step_ms"] for r in these]  # > 1: faster than plain NCCL
            kept: dict[str, int] = {}
            for r in these:
                kept[r["kept"]] = kept.get(r["kept"], 0) + 1
            kept_text = ", ".join(f"{k} ×{n}" for k, n in sorted(kept.items(), key=lambda kv: -kv[1]))
            spread = f"{min(ratios):.4f}–{max(ratios):.4f}"
            print(f"| {law} | {mode} | {statistics.median(ratios):.4f}× ({spread}) | {kept_text} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
