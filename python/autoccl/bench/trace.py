"""Reading the plugin's per-process JSONL trace (AUTOCCL_TRACE, docs/architecture.md) and deciding when
the online tuner converged: the call index from which the decision of a task no longer changes."""

from __future__ import annotations

import glob
import json
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from autoccl.bench.spec import PLUGIN_COLL

TORCH_COLL = {v: k for k, v in PLUGIN_COLL.items()}


def trace_files(prefix: str) -> list[Path]:
    return sorted(Path(p) for p in glob.glob(glob.escape(prefix) + ".*.jsonl"))


def unreadable_lines(count: int) -> str:
    """ "1 unreadable line", "2 unreadable lines"."""
    return f"{count} unreadable {'line' if count == 1 else 'lines'}"


def read_records(paths: Iterable[Path], warn: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """The records of trace files. A line that is no JSON object (cut short by a killed process, or
    damaged) is left out; `warn`, where given, is told how many such lines each file had, once per file."""
    out: list[dict[str, Any]] = []
    for p in paths:
        unreadable = 0
        with open(p, errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    unreadable += 1
                    continue
                if isinstance(rec, dict):
                    out.append(rec)
                else:
                    unreadable += 1
        if unreadable and warn is not None:
            warn(f"skipped {unreadable_lines(unreadable)} in {p}")
    return out


def _decision(rec: dict[str, Any]) -> tuple[Any, ...]:
    return (
        rec.get("algo"),
        rec.get("proto"),
        rec.get("channels"),
        rec.get("chunk"),
        rec.get("chunk_halvings"),
    )


def convergence(records: list[dict[str, Any]], rank: int = 0) -> list[dict[str, Any]]:
    """One entry per task (comm, coll, bytes) seen by `rank`: calls, the call index of the last decision
    change (`converged_at`: the decision from that call on is final), the final decision and its source,
    the number of distinct decisions tried, where each run of one decision begins and whether it left
    everything to NCCL (`runs`: [position among the task's calls in the trace, at NCCL's choice]; positions,
    not call indices, so that a trace missing calls still splits into halves by what it holds), and the GPU
    time of every timed call (`gpu_us`, by call)."""
    tasks: dict[tuple[str, str, int], dict[str, Any]] = {}
    for rec in records:
        if rec.get("rank", 0) != rank or rec.get("ev") not in ("call", "time"):
            continue
        key = (str(rec.get("comm", "")), str(rec.get("coll", "")), int(rec.get("bytes", 0)))
        t = tasks.setdefault(key, {"calls": {}, "times": {}})
        k = int(rec.get("call", -1))
        if rec["ev"] == "call":
            t["calls"][k] = rec
        elif "gpu_us" in rec:
            t["times"][k] = float(rec["gpu_us"])
    out: list[dict[str, Any]] = []
    for (comm, coll, nbytes), t in sorted(tasks.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        calls = [t["calls"][k] for k in sorted(t["calls"])]
        changes: list[int] = []
        runs: list[list[Any]] = []
        seen = set()
        for i, rec in enumerate(calls):
            seen.add(_decision(rec))
            changed = bool(i) and _decision(rec) != _decision(calls[i - 1])
            if changed:
                changes.append(int(rec.get("call", i)))
            if changed or not i:
                runs.append([i, at_nccl_choice(rec)])
        last_change = changes[-1] if changes else 0
        final = calls[-1] if calls else {}
        times = t["times"]
        out.append(
            {
                "comm": comm,
                "coll": TORCH_COLL.get(coll, coll),
                "bytes": nbytes,
                "calls": len(calls),
                "converged_at": last_change,
                "changes": changes,
                "decisions_tried": len(seen),
                "runs": runs,
                "final": {
                    **{k: final.get(k) for k in ("algo", "proto", "channels", "chunk", "source")},
                    "chunk_halvings": int(final.get("chunk_halvings") or 0),  # absent in older traces
                },
                "gpu_us": [[k, times[k]] for k in sorted(times)],
            }
        )
    return out


def search_end_iteration(conv: list[dict[str, Any]], iters: int, settled: int) -> int | None:
    """How many iterations of a training run passed before the job first ran `settled` iterations in a
    row with no recurring task changing its decision: the search, its duels and the step guard's first
    round are over. Later changes (the guard's periodic re-checks) are part of the tuned job and stay in
    what follows. Recurring: a call at least every other iteration (DDP's first step has buckets of its
    own, so its per-step tasks miss one); set-up calls and rarer tasks do not count. A task's call index
    maps to an iteration by its calls per iteration. None when the trace holds no recurring task;
    `iters` when the run never settled."""
    if iters <= 0:
        return None
    marks: set[int] = set()
    recurring = False
    for t in conv:
        if 2 * t["calls"] < iters:
            continue
        recurring = True
        per_iter = t["calls"] / iters
        for k in t["changes"]:
            marks.add(int(k / per_iter))  # the iteration (0-based) that runs the new decision
    if not recurring:
        return None
    at = 0
    for m in sorted(marks):
        if m - at >= settled:
            return at
        at = m
    return at if iters - at >= settled else iters


def at_nccl_choice(decision: dict[str, Any]) -> bool:
    """A decision (a trace's call record, or convergence()'s `final`) left everything to NCCL: no algorithm,
    protocol, channel count or chunk forced."""
    return (
        decision.get("algo") is None
        and decision.get("proto") is None
        and not decision.get("channels")
        and not decision.get("chunk")
        and not decision.get("chunk_halvings")
    )


# A launch fell back when at least this share of every recurring task's calls in its second half (what the
# steady step measures) ran NCCL's choice: the step guard's re-check rounds run the tuned plan for 12 of 24
# iterations every 256 or more, at most 6 % of a 200-iteration half. A share of calls, not of iterations (a
# step with an uneven first iteration, as DDP's, shifts it a little).
FELL_BACK_SHARE = 0.9


def _second_half_nccl_share(task: dict[str, Any]) -> float | None:
    """The share of a task's calls in its second half that ran NCCL's choice, from its runs of decisions
    (positions among its calls); None without them (convergence written before they were)."""
    runs = task.get("runs")
    if not isinstance(runs, list) or not runs:
        return None
    n = int(task["calls"])
    half = n // 2
    nccl = 0
    for i, (start, at_nccl) in enumerate(runs):
        end = runs[i + 1][0] if i + 1 < len(runs) else n
        if at_nccl:
            nccl += max(0, end - max(start, half))
    return nccl / max(1, n - half)


def fell_back_to_nccl(conv: list[dict[str, Any]], iters: int) -> dict[str, Any] | None:
    """How a training launch's recurring tasks (as search_end_iteration counts them) ended: their number, how
    many tried another decision, how many run NCCL's own choice at the end, the iteration of the last decision
    change, the smallest share of a task's second-half calls on NCCL's choice, and whether the launch fell
    back: some task tried another decision, every one ended on NCCL's choice (the step guard's fall-back, or
    searches that found nothing better), and every one ran NCCL's choice for at least FELL_BACK_SHARE of its
    second half, which the steady step measures (the guard's re-check rounds fit in the rest; a launch whose
    guard kept the tuned plan and that ends inside a round's NCCL block does not reach it, nor one whose
    search ran into that half). Without the runs of decisions, no change after the first half at all. A
    launch that never tried anything did not fall back: what it measured is the plugin's presence. None when
    the trace holds no recurring task."""
    if iters <= 0:
        return None
    recurring = [t for t in conv if 2 * t["calls"] >= iters]
    if not recurring:
        return None
    at_nccl = sum(1 for t in recurring if at_nccl_choice(t["final"]))
    tried = sum(1 for t in recurring if t.get("changes"))
    last_change = max(
        (int(t["changes"][-1] / (t["calls"] / iters)) for t in recurring if t.get("changes")), default=0
    )
    shares = [x for x in (_second_half_nccl_share(t) for t in recurring) if x is not None]
    share: float | None = None
    if len(shares) == len(recurring):
        share = min(shares)
        second_half_nccl = share >= FELL_BACK_SHARE
    else:  # convergence without runs of decisions: no change after the first half
        second_half_nccl = last_change <= iters // 2
    return {
        "recurring_tasks": len(recurring),
        "tasks_tried": tried,
        "tasks_at_nccl": at_nccl,
        "last_change_iter": last_change,
        "second_half_nccl_share": share,
        "fell_back_to_nccl": tried > 0 and at_nccl == len(recurring) and second_half_nccl,
    }


def guard_verdicts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The step guard's verdicts (the authorities' `guard` records), in the order each communicator reached
    them: the round's first iteration, the verdict's (`at`), what won, both medians in microseconds with their
    sample counts, the margin the tuned plan had to beat NCCL's by, and the samples ([iteration, arm,
    microseconds (the longest of the clock ranks' times), the authority's own (`own_us`: 0 where it never
    came; older traces: the same as `us`) and how many ranks' times came (`ranks`; older traces: 1), the
    iteration's first call as {coll, bytes, call} where the trace has it])."""
    out: list[dict[str, Any]] = []
    for rec in records:
        if rec.get("ev") != "guard":
            continue
        samples: list[dict[str, Any]] = []
        for x in rec.get("samples", []):
            us = float(x["us"])
            sample: dict[str, Any] = {
                "it": int(x["it"]),
                "arm": str(x["arm"]),
                "us": us,
                "own_us": float(x.get("own_us", us)),
                "ranks": int(x.get("ranks", 1)),
            }
            if "call" in x:  # the iteration's first call, where the authority still knew it
                coll = TORCH_COLL.get(x["coll"], x["coll"])
                sample.update(coll=coll, bytes=int(x["bytes"]), call=int(x["call"]))
            samples.append(sample)
        out.append(
            {
                "comm": str(rec.get("comm", "")),
                "period": int(rec.get("period", 0)),
                "round_begin": int(rec.get("round_begin", 0)),
                "at": int(rec.get("at", 0)),
                "winner": str(rec.get("winner", "")),
                "tuned": bool(rec.get("tuned")),
                "tuned_us": float(rec.get("tuned_us", 0.0)),
                "tuned_samples": int(rec.get("tuned_samples", 0)),
                "nccl_us": float(rec.get("nccl_us", 0.0)),
                "nccl_samples": int(rec.get("nccl_samples", 0)),
                "margin": float(rec.get("margin", 0.0)),
                # the tuned plan's kernel savings an iteration when judged (-1: unknown), and whether its
                # faster median was put down to noise for exceeding what they explain
                "plan_gain_us": float(rec.get("plan_gain_us", -1.0)),
                "unexplained": bool(rec.get("unexplained", False)),
                # rounds voided before this verdict because the iteration grew under them
                "voided_before": int(rec.get("voided_before", 0)),
                # what the round cost against running the winner throughout (us; 0 in older traces)
                "cost_us": float(rec.get("cost_us", 0.0)),
                # ... and against NCCL's choices (what the job's regret budget was charged)
                "regret_us": float(rec.get("regret_us", 0.0)),
                "samples": samples,
            }
        )
        positions = rec.get("winner_positions")
        if isinstance(positions, list):  # an estimated arm won: the positions it capped
            out[-1]["winner_positions"] = [int(p) for p in positions]
    return out


def annotate(conv: list[dict[str, Any]], measure_from: dict[str, int]) -> None:
    """Mark each task converged before its measurement began. `measure_from` maps `coll/bytes` to the
    number of calls the harness made before the timed repetitions."""
    for t in conv:
        start = measure_from.get(f"{t['coll']}/{t['bytes']}")
        t["measure_from"] = start
        t["converged_before_measure"] = None if start is None else t["converged_at"] <= start
