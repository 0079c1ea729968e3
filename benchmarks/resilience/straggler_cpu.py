"""The CI straggler / lost-rank scenario of tests/resilience at full length, with its numbers written out.

Runs N ranks of tests/resilience/train_worker.py on gloo (the step's accelerator time is a sleep, the tiny
GPT trains for real on Markov tokens): synchronous DDP with and without a straggler, the resilient reducer
with and without it, and a resilient run in which one rank is killed. Every run has a hard time-out.
Writes OUT/summary.json, OUT/summary.md and OUT/curves.png.

    python benchmarks/resilience/straggler_cpu.py --steps 500 -o benchmarks/results/cpu/<claim>
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "resilience"))
from resilience_ranks import Run, run_ranks


def step_times_ms(out: dict[str, Any]) -> dict[int, float]:
    """Step -> time from the previous step's update to this one's, on this rank's clock."""
    if out["mode"] == "sync":
        done = {int(k): v for k, v in out["done_at"].items()}
    else:
        done = {r["round"]: r["done_s"] for r in out["records"]}
    return {s: (done[s] - done[s - 1]) * 1e3 for s in sorted(done) if s - 1 in done}


def mean_step_ms(out: dict[str, Any], warm: int) -> float:
    times = [t for s, t in step_times_ms(out).items() if s >= warm]
    return sum(times) / len(times)


def agreed(run: Run) -> bool:
    """Every rank recorded the same (epoch, round, kind, group, members) for every round."""
    views = [
        [(x["epoch"], x["round"], x["kind"], tuple(x["group"]), tuple(x["members"])) for x in o["records"]]
        for o in run.outputs.values()
    ]
    return all(v == views[0] for v in views)


def main() -> int:
    ap = argparse.ArgumentParser(description="The resilience scenario of tests/resilience at full length.")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--straggler", default="3:0.2:2-5")
    ap.add_argument("--kill", default="2:250", help="RANK:STEP of the lost-rank run ('' for none)")
    ap.add_argument("--compute-ms", default="60")
    ap.add_argument("--hang-s", type=float, default=900.0, help="hard time-out per run")
    ap.add_argument("--warm", type=int, default=10, help="steps left out of the mean step time")
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args()
    shape = ["--compute-ms", a.compute_ms, "--batch", "8", "--seq", "32", "--lr", "2e-3"]
    steps = ["--steps", str(a.steps)]
    plan = {
        "sync/clean": ["--mode", "sync", *steps],
        "sync/straggler": ["--mode", "sync", *steps, "--straggler", a.straggler],
        "resilient/clean": ["--mode", "resilient", *steps],
        "resilient/straggler": ["--mode", "resilient", *steps, "--straggler", a.straggler],
    }
    if a.kill:
        plan["resilient/kill"] = ["--mode", "resilient", *steps, "--kill", a.kill]
    runs: dict[str, Run] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in plan.items():
            print(f"{name} ...", file=sys.stderr, flush=True)
            runs[name] = run_ranks(a.ranks, [*args, *shape], Path(tmp) / name.replace("/", "-"), a.hang_s)
    a.output.mkdir(parents=True, exist_ok=True)
    base = runs["sync/clean"].outputs[0]
    rows = []
    for name, run in runs.items():
        row: dict[str, Any] = {
            "run": name,
            "seconds": round(run.seconds, 1),
            "hung": run.hung,
            "exit_codes": {str(r): c for r, c in run.codes.items()},
        }
        if run.outputs:
            first = run.outputs[min(run.outputs)]
            row["mean_step_ms"] = mean_step_ms(first, a.warm)
            row["step_vs_sync_clean"] = row["mean_step_ms"] / mean_step_ms(base, a.warm)
            row["eval_loss"] = first["eval_loss"]
            row["loss_vs_sync_clean"] = first["eval_loss"] / base["eval_loss"]
            row["same_weights"] = len({o["digest"] for o in run.outputs.values()}) == 1
            if first["mode"] == "resilient":
                st = first["stats"]
                row["membership_agreed"] = agreed(run)
                row["partial_rounds"] = st.get("partial_rounds")
                row["max_staleness"] = st.get("max_staleness")
                row["recoveries"] = st.get("recoveries")
                row["survivors"] = sorted(run.outputs)
        rows.append(row)
    summary = {
        "ranks": a.ranks,
        "steps": a.steps,
        "straggler": a.straggler,
        "kill": a.kill,
        "compute_ms": float(a.compute_ms),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "rows": rows,
    }
    (a.output / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    md = [
        "| run | mean ms/step | vs sync/clean | eval loss | vs sync/clean | partial steps | max staleness "
        "| membership agreed | same weights | exit codes | hung |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        codes = " ".join(f"{k}:{v}" for k, v in r["exit_codes"].items())
        md.append(
            f"| {r['run']} | {r.get('mean_step_ms', float('nan')):.1f} | "
            f"{r.get('step_vs_sync_clean', float('nan')):.3f} | {r.get('eval_loss', float('nan')):.4f} | "
            f"{r.get('loss_vs_sync_clean', float('nan')):.4f} | {r.get('partial_rounds', '–')} | "
            f"{r.get('max_staleness', '–')} | {r.get('membership_agreed', '–')} | {r.get('same_weights')} | "
            f"{codes} | {r['hung'] or 'none'} |"
        )
    (a.output / "summary.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    plot(runs, a.output / "curves.png", a.warm)
    return 0 if all(not r["hung"] for r in rows) else 1


def plot(runs: dict[str, Run], path: Path, warm: int, window: int = 20) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6.5), sharex=True)
    for name, run in runs.items():
        if not run.outputs:
            continue
        out = run.outputs[min(run.outputs)]
        style = "-" if name.startswith("resilient") else "--"
        losses = sorted((int(k), v) for k, v in out["losses"].items())
        top.plot(*_rolling(losses, window), style, label=name, linewidth=1.1)
        times = [(s, t) for s, t in sorted(step_times_ms(out).items()) if s >= warm]
        bottom.plot(*_rolling(times, window), style, label=name, linewidth=1.1)
    top.set_ylabel(f"training loss (mean of {window} steps)")
    bottom.set_ylabel(f"step time, ms (mean of {window} steps)")
    bottom.set_xlabel("step")
    top.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _rolling(points: list[tuple[int, float]], window: int) -> tuple[list[int], list[float]]:
    xs, ys, buf = [], [], []
    for x, y in points:
        buf = [*buf[-(window - 1) :], y]
        xs.append(x)
        ys.append(sum(buf) / len(buf))
    return xs, ys


if __name__ == "__main__":
    sys.exit(main())
