#!/usr/bin/env python3
"""Drive NVIDIA's nccl-tests (built beside the project, never committed) over a plan of configurations
and write one JSONL row per (run, size) with busbw, time, data-check errors and what NCCL reported.

Plans:
  env-oracle     the per-task space through NCCL's own knobs (NCCL_ALGO/NCCL_PROTO, NCCL_MIN/MAX_CTAS):
                 calibration data for the emulator, and a cross-check of the plugin's fixed mode.
  plain          NCCL with none of our settings.
  observe        `autoccl run --mode observe`: must change nothing; records NCCL's choice and timing.
  overhead       small sizes, many iterations: plain NCCL, the plugin loaded but idle (table mode, no table:
                 timing events off), and observe mode (timing events on): what the plugin costs per call.
  online         `autoccl run --mode online --channel-ceiling 64`, many warm-up iterations (the tuning phase)
                 before the timed ones; every rank's per-call decisions must be identical (from the traces).
  plain-long     plain NCCL with the same iteration counts as `online`, for the comparison.
  fixed          `autoccl run --mode fixed` for every supported (algorithm, protocol) and several channel
                 counts; the plugin's trace must show NCCL used exactly the forced configuration.
Every launch keeps NVLink multicast off. A run that exceeds its timeout counts as a hang.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAFETY = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
COLLS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce")
NCCL_NAME = {
    "all_gather": "allgather",
    "reduce_scatter": "reducescatter",
    "all_reduce": "allreduce",
    "broadcast": "broadcast",
    "reduce": "reduce",
}
# (algorithm, protocol) pairs NCCL supports on one NVSwitch host with NVLS off.
PAIRS = {
    "all_reduce": [("ring", p) for p in ("ll", "ll128", "simple")]
    + [("tree", p) for p in ("ll", "ll128", "simple")],
}
for _c in ("all_gather", "reduce_scatter", "broadcast", "reduce"):
    PAIRS[_c] = [("ring", p) for p in ("ll", "ll128", "simple")]

ROW = re.compile(
    r"^\s+(\d+)\s+(\d+)\s+(\w+)\s+(\S+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
)


@dataclass
class Run:
    coll: str
    label: str
    env: dict[str, str]
    wrapper: list[str] = field(default_factory=list)  # e.g. autoccl run ... --
    max_bytes: str = "1G"
    forced: dict[str, object] | None = None


def parse_rows(text: str) -> list[dict[str, object]]:
    """nccl-tests result rows; `cycle` counts the passes over the sizes (nccl-tests -N), from 0."""
    rows = []
    cycle, last_bytes = 0, -1
    for line in text.splitlines():
        m = ROW.match(line)
        if not m:
            continue
        g = m.groups()
        if int(g[0]) <= last_bytes:
            cycle += 1
        last_bytes = int(g[0])

        def wrong(s: str) -> int | None:
            return None if s == "N/A" else int(s)

        rows.append(
            {
                "bytes": int(g[0]),
                "count": int(g[1]),
                "dtype": g[2],
                "oop_time_us": float(g[5]),
                "oop_algbw_gbs": float(g[6]),
                "oop_busbw_gbs": float(g[7]),
                "oop_wrong": wrong(g[8]),
                "ip_time_us": float(g[9]),
                "ip_algbw_gbs": float(g[10]),
                "ip_busbw_gbs": float(g[11]),
                "ip_wrong": wrong(g[12]),
                "cycle": cycle,
            }
        )
    return rows


def plan_runs(
    plan: str,
    channels: list[int],
    autoccl: list[str],
    colls: list[str],
    online_ceiling: int = 64,
    nccl_channels: int = 0,
) -> list[Run]:
    runs: list[Run] = []
    for coll in colls:
        name = NCCL_NAME[coll]
        if plan == "plain":
            runs.append(Run(coll, "nccl-default", {}))
        elif plan == "overhead":
            idle = [*autoccl, "run", "--mode", "table", "--cache-dir", "/tmp/autoccl-empty-cache", "--"]
            observe = [*autoccl, "run", "--mode", "observe", "--"]
            table = [*autoccl, "run", "--mode", "table", "--cache-dir", "/tmp/autoccl-empty-cache", "--"]
            for label, wrapper, env in (
                ("nccl-default", [], {}),
                ("plugin-idle", idle, {"AUTOCCL_MEASURE_CALLS": "0"}),  # no timing events at all
                ("table-measuring", table, {}),  # default: the first calls of each task are timed
                ("observe", observe, {}),  # every call timed
            ):
                runs.append(Run(coll, label, env, wrapper=wrapper, max_bytes="1M"))
        elif plan in ("online", "table"):
            # table: apply what an earlier online run saved in the cache (AUTOCCL_CACHE_DIR), no search
            ceiling = ["--channel-ceiling", str(online_ceiling)] if online_ceiling else []
            if nccl_channels:
                ceiling += ["--nccl-channels", str(nccl_channels)]
            wrapper = [*autoccl, "run", "--mode", plan, *ceiling, "--"]
            runs.append(Run(coll, plan, {}, wrapper=wrapper))
        elif plan == "plain-long":
            runs.append(Run(coll, "nccl-default", {}))
        elif plan == "observe":
            runs.append(Run(coll, "observe", {}, wrapper=[*autoccl, "run", "--mode", "observe", "--"]))
        elif plan in ("env-oracle", "fixed"):
            for algo, proto in PAIRS[coll]:
                # LL moves 8 bytes per 16 on the wire: never competitive at the top sizes; keep runs short.
                max_bytes = "128M" if proto == "ll" else "1G"
                for ch in channels:
                    forced = {"algo": algo, "proto": proto, "channels": ch}
                    if plan == "env-oracle":
                        env = {"NCCL_ALGO": f"{name}:{algo}", "NCCL_PROTO": f"{name}:{proto}"}
                        if ch:
                            env.update({"NCCL_MIN_CTAS": str(ch), "NCCL_MAX_CTAS": str(ch)})
                        runs.append(
                            Run(
                                coll,
                                f"{algo}/{proto}/{ch or 'default'}",
                                env,
                                max_bytes=max_bytes,
                                forced=forced,
                            )
                        )
                    else:
                        rule = f"{name}:{algo}/{proto}" + (f"/{ch}" if ch else "")
                        wrapper = [
                            *autoccl,
                            "run",
                            "--mode",
                            "fixed",
                            "--fixed",
                            rule,
                            "--channel-ceiling",
                            "64",
                            "--",
                        ]
                        runs.append(Run(coll, rule, {}, wrapper=wrapper, max_bytes=max_bytes, forced=forced))
        else:
            raise SystemExit(f"unknown plan {plan!r}")
    return runs


def trace_records(files: list[str], ev: str) -> Iterator[dict[str, Any]]:
    """The plugin's JSONL trace records of one kind (a torn last line of a killed process is skipped)."""
    for path in files:
        with open(path) as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if rec.get("ev") == ev:
                    yield rec


def check_trace(trace_prefix: str, forced: dict[str, object] | None) -> dict[str, object]:
    """Compare what NCCL reported (Coll events, in the plugin's trace) with what was forced."""
    files = glob.glob(trace_prefix + "*.jsonl")
    times = 0
    mismatches: list[dict[str, object]] = []
    reported: dict[str, int] = {}
    for rec in trace_records(files, "time"):
        times += 1
        key = f"{rec.get('nccl_algo')}/{rec.get('nccl_proto')}/{rec.get('nccl_channels')}"
        reported[key] = reported.get(key, 0) + 1
        if forced is None:
            continue
        ok = (
            str(rec.get("nccl_algo", "")).lower() == forced["algo"]
            and str(rec.get("nccl_proto", "")).lower() == forced["proto"]
        )
        if forced["channels"] and int(rec.get("nccl_channels", -1)) != forced["channels"]:
            ok = False
        if not ok and len(mismatches) < 5:
            mismatches.append(rec)
    return {
        "trace_files": len(files),
        "timed_calls": times,
        "reported": reported,
        "mismatches": mismatches,
        **cross_rank_agreement(files),
    }


def cross_rank_agreement(files: list[str]) -> dict[str, object]:
    """Every rank of a communicator must have applied the same configuration on the k-th call of a task."""
    applied: dict[tuple[object, ...], dict[object, tuple[object, ...]]] = {}
    for rec in trace_records(files, "call"):
        key = (rec.get("comm"), rec.get("coll"), rec.get("bytes"), rec.get("pipe"), rec.get("call"))
        cfg = (
            rec.get("algo"),
            rec.get("proto"),
            rec.get("channels"),
            rec.get("chunk"),
            rec.get("chunk_halvings"),
        )
        applied.setdefault(key, {})[rec.get("rank")] = cfg
    divergent = [k for k, per_rank in applied.items() if len(set(per_rank.values())) > 1]
    return {
        "calls_compared": len(applied),
        "divergent_calls": len(divergent),
        "divergent_examples": [str(k) for k in divergent[:3]],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", required=True, help="nccl-tests build directory")
    ap.add_argument(
        "--plan",
        required=True,
        choices=["env-oracle", "plain", "plain-long", "observe", "fixed", "online", "table", "overhead"],
    )
    ap.add_argument(
        "--launch",
        default="single",
        choices=["single", "mpi"],
        help="one process for all GPUs, or one per GPU",
    )
    ap.add_argument("--gpus", type=int, default=0, help="GPU count (default: all visible)")
    ap.add_argument("--channels", default="0", help="comma list; 0 = NCCL's default")
    ap.add_argument(
        "--online-ceiling",
        type=int,
        default=64,
        help="plan online: communicators' channel ceiling (autoccl run --channel-ceiling); 0 = NCCL's own",
    )
    ap.add_argument(
        "--online-nccl-channels",
        type=int,
        default=0,
        help="plans online/table: autoccl run --nccl-channels (NCCL's own choice capped at a plain "
        "communicator's channel count); 0 = not set",
    )
    ap.add_argument("--colls", default=",".join(COLLS))
    ap.add_argument("--min-bytes", default="1M")
    ap.add_argument("--iters", type=int, default=15)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--check", type=int, default=1, help="nccl-tests -c (data check)")
    ap.add_argument(
        "--cycles",
        type=int,
        default=1,
        help="nccl-tests -N: passes over all sizes in one process (rows carry `cycle`; the last one is "
        "busbw after tuning)",
    )
    ap.add_argument("--budget-s", type=float, default=1e9, help="stop launching runs after this many seconds")
    ap.add_argument("--timeout-s", type=float, default=150, help="a run longer than this is a hang")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--autoccl", default=f"{sys.executable} -m autoccl.cli")
    ap.add_argument("--out", required=True, help="JSONL output")
    ap.add_argument("--logdir", default="", help="keep each run's raw output here")
    ap.add_argument("--keep-traces", default="", help="move the plugin's trace files here")
    args = ap.parse_args()

    gpus = args.gpus or len(
        subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout.splitlines()
    )
    channels = [int(c) for c in args.channels.split(",")]
    runs = plan_runs(
        args.plan,
        channels,
        args.autoccl.split(),
        args.colls.split(","),
        args.online_ceiling,
        args.online_nccl_channels,
    )
    t0 = time.time()
    n_done = n_fail = 0
    with open(args.out, "a") as out:
        for i, run in enumerate(runs):
            if time.time() - t0 > args.budget_s:
                print(f"budget reached: {len(runs) - i} of {len(runs)} runs not started", flush=True)
                break
            exe = str(Path(args.bin) / (f"{run.coll}_perf" + ("_mpi" if args.launch == "mpi" else "")))
            nt = [
                exe,
                "-b",
                args.min_bytes,
                "-e",
                run.max_bytes,
                "-f",
                "2",
                "-n",
                str(args.iters),
                "-w",
                str(args.warmup),
                "-c",
                str(args.check),
                "-N",
                str(args.cycles),
            ]
            if args.launch == "single":
                cmd = [*run.wrapper, *nt, "-g", str(gpus)]
            else:
                cmd = [*run.wrapper, args.mpirun, "-np", str(gpus), *nt, "-g", "1"]
            trace = f"/tmp/autoccl-trace-{os.getpid()}-{i}"
            env = {**os.environ, **SAFETY, **run.env, "AUTOCCL_TRACE": trace}
            started = time.time()
            try:
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout_s)
                text, rc, hang = p.stdout + p.stderr, p.returncode, False
            except subprocess.TimeoutExpired as e:
                text = (
                    (e.stdout or b"").decode(errors="replace")
                    if isinstance(e.stdout, bytes)
                    else (e.stdout or "")
                )
                rc, hang = -9, True
            wall = time.time() - started
            rows = parse_rows(text)
            wrong = sum((r["oop_wrong"] or 0) + (r["ip_wrong"] or 0) for r in rows)  # type: ignore[operator]
            trace_info = check_trace(trace, run.forced) if run.wrapper else None
            if args.keep_traces:
                Path(args.keep_traces).mkdir(parents=True, exist_ok=True)
                for k, f in enumerate(sorted(glob.glob(trace + "*.jsonl"))):
                    os.replace(f, Path(args.keep_traces) / f"{args.plan}-{args.launch}-{i:03d}-{k}.jsonl")
            ok = bool(rc == 0 and not hang and rows and wrong == 0)
            if trace_info is not None and args.plan in ("observe", "fixed", "online"):
                # The plugin must have timed calls (it loaded and saw the Coll/KernelCh events), and NCCL
                # must have used exactly what was forced.
                ok = ok and trace_info["timed_calls"] > 0 and not trace_info["mismatches"]
            if trace_info is not None:
                ok = ok and trace_info["divergent_calls"] == 0
            n_done += 1
            n_fail += 0 if ok else 1
            if args.logdir:
                Path(args.logdir).mkdir(parents=True, exist_ok=True)
                (Path(args.logdir) / f"{args.plan}-{args.launch}-{i:03d}.log").write_text(
                    " ".join(cmd) + "\n" + text
                )
            for r in rows:
                rec = {
                    "plan": args.plan,
                    "launch": args.launch,
                    "nranks": gpus,
                    "coll": NCCL_NAME[run.coll],
                    "label": run.label,
                    "env": run.env,
                    **(run.forced or {}),
                    **r,
                    "busbw_gbs": r["oop_busbw_gbs"],
                    "time_us": r["oop_time_us"],
                }
                out.write(json.dumps(rec) + "\n")
            out.write(
                json.dumps(
                    {
                        "plan": args.plan,
                        "launch": args.launch,
                        "run": run.label,
                        "coll": run.coll,
                        "summary": True,
                        "rc": rc,
                        "hang": hang,
                        "rows": len(rows),
                        "wrong": wrong,
                        "wall_s": round(wall, 2),
                        "ok": bool(ok),
                        "trace": trace_info,
                        "cmd": " ".join(cmd),
                    }
                )
                + "\n"
            )
            out.flush()
            best = max((r["oop_busbw_gbs"] for r in rows), default=0.0)
            print(
                f"[{i + 1}/{len(runs)} {time.time() - t0:6.0f}s] {run.coll:15s} {run.label:28s} "
                f"rc={rc} rows={len(rows)} wrong={wrong} maxbusbw={best:.1f} {'OK' if ok else 'FAIL'} "
                f"({wall:.1f}s)",
                flush=True,
            )
    print(f"{args.plan}/{args.launch}: {n_done} runs, {n_fail} failed", flush=True)
    return 1 if n_fail else 0


if __name__ == "__main__":
    sys.exit(main())
