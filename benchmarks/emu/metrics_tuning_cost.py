"""What the metrics files cost the calling thread while a task is still being decided, in the emulator.

The GPU measurement this mirrors: nccl-tests' 1 MiB all_reduce, one process per GPU (`mpirun -np 2`), mode
online, 20 warm-up calls, then 200 timed out-of-place calls (the task still being decided) and 200 in place.
Here: 2 ranks, one emulator process each (decisions over the TCP board, as with one process per GPU), the
plugin's launch clock (`--launch-clock`), the rank processes bounded against each other (`lead`), 420 calls
of a 1 MiB all_reduce. Modes, interleaved within each repetition (alternating order): metrics off, metrics
every 1 s (the GPU run's setting), and every 0.1 s (ten times more ticks inside the job); `sampled`: metrics
off, and the task judged small by its samples alone (`AUTOCCL_MODEL_SMALL_PCT=0`, as before NCCL's cost model
could decide it at its first call). CPU only.

Per run and rank: the plugin's own host time per call (the emulator's `plugin_ns`: every tuner and profiler
call on the rank's thread, i.e. getCollInfo with any wait for the authority, and the launch and Coll events)
over the timed out-of-place window (calls 20-219) and the in-place window (220-419): median, p99, max and
total; and what the search decided (the authority's task record: small task or pinned, configuration,
convergence call, segment lookups and their waits).

    AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python python3 benchmarks/emu/metrics_tuning_cost.py --reps 6 \
        --json runs.jsonl
"""

from __future__ import annotations

import argparse
import json
import secrets
import socket
import statistics
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from autoccl.emu import run, simple

WARMUP, TIMED = 20, 200
# mode -> (metrics interval, further settings)
MODES: dict[str, tuple[str | None, dict[str, str]]] = {
    "off": (None, {}),
    "on-1s": ("1", {}),
    "on-0.1s": ("0.1", {}),
    "sampled": (None, {"AUTOCCL_MODEL_SMALL_PCT": "0"}),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def pct(v: list[float], q: float) -> float:
    s = sorted(v)
    return s[min(len(s) - 1, int(len(s) * q))] if s else 0.0


def window(calls: list[dict[str, Any]], lo: int, hi: int) -> dict[str, float]:
    ns = [float(c["plugin_ns"]) for c in calls if lo <= int(c["call"]) < hi]
    if not ns:
        return {}
    return {
        "median_us": statistics.median(ns) / 1e3,
        "p99_us": pct(ns, 0.99) / 1e3,
        "max_us": max(ns) / 1e3,
        "total_us": sum(ns) / 1e3,
    }


def once(mode: str, seed: int, tmp: Path) -> dict[str, Any]:
    interval, settings = MODES[mode]
    env = {
        **settings,
        "AUTOCCL_MODE": "online",
        "AUTOCCL_HW": "GPU Xx4",
        "AUTOCCL_CACHE_DIR": str(tmp / "cache"),
        "AUTOCCL_COORD_ADDR": f"127.0.0.1:{free_port()}",
        "AUTOCCL_COORD_TOKEN": secrets.token_hex(16),
    }
    if interval is not None:
        (tmp / "metrics").mkdir()
        env["AUTOCCL_METRICS_DIR"] = str(tmp / "metrics")
        env["AUTOCCL_METRICS_INTERVAL_S"] = interval
    # the trace is needed for the search's task record only: it is written at finalize, and per-call lines
    # are the same in every mode
    sc = replace(simple({"allreduce": [1 << 20]}, nranks=2, repeat=WARMUP + 2 * TIMED, seed=seed), lead=8)
    res = run(sc, env=env, processes=True, extra_args=["--launch-clock"], timeout=300, workdir=tmp / "work")
    if res.returncode != 0:
        raise SystemExit(f"emulator run failed ({mode}): {res.stderr[-800:]}")
    if interval is not None and not list((tmp / "metrics").glob("*.prom")):
        raise SystemExit("metrics on, but no metrics file was written")
    wall = max(float(s["wall_s"]) for s in res.summaries)
    out: dict[str, Any] = {"mode": mode, "seed": seed, "wall_s": wall}
    for rank in (0, 1):
        calls = [c for c in res.calls if int(c["rank"]) == rank]
        ordered = sorted(calls, key=lambda c: int(c["call"]))
        configs = [(c["algo"], c["proto"], int(c["channels"])) for c in ordered]
        last_change = max((i for i in range(1, len(configs)) if configs[i] != configs[i - 1]), default=0)
        out[f"r{rank}"] = {
            "oop": window(calls, WARMUP, WARMUP + TIMED),
            "ip": window(calls, WARMUP + TIMED, WARMUP + 2 * TIMED),
            "final_config": "/".join(str(x) for x in configs[-1]) if configs else None,
            "last_config_change_call": last_change,
            "configs_tried": len(set(configs)),
        }
    tasks = [t for t in res.trace if t.get("ev") == "task" and int(t.get("rank", -1)) == 0]
    if tasks:
        t = tasks[0]
        out["search"] = {
            k: t.get(k)
            for k in (
                "small_task",
                "small_by_model",
                "model_us",
                "converged_at",
                "algo",
                "proto",
                "channels",
                "lookups",
                "lookup_us",
                "lookup_max_us",
                "search_samples",
                "search_lost",
                "slow_lookups",
            )
        }
    return out


def markdown_table(rows: list[dict[str, Any]], modes: list[str]) -> str:
    """One row per mode: when the task was decided, its lookups and their waits, and what the timed
    out-of-place window cost the plugin on each rank."""
    out = [
        "| mode | runs | decision call per run | runs deciding after call 20 | lookups per run (rank 0) "
        "| lookup wait ms, median [max] | median µs/call (oop, both ranks) "
        "| slowest rank's oop total µs, median [min–max] | runs with a call > 1 ms (oop) |",
        "| --- | ---: | --- | ---: | --- | --- | --- | --- | ---: |",
    ]
    for mode in modes:
        rs = [r for r in rows if r["mode"] == mode]
        if not rs:
            continue
        conv = sorted(int(r["search"]["converged_at"] or 0) for r in rs)
        calls = ", ".join(f"{c} ×{conv.count(c)}" if conv.count(c) > 1 else str(c) for c in sorted(set(conv)))
        lookups = sorted(int(r["search"]["lookups"] or 0) for r in rs)
        waits = [float(r["search"]["lookup_us"] or 0) / 1e3 for r in rs]
        meds = [float(r[f"r{k}"]["oop"]["median_us"]) for r in rs for k in (0, 1)]
        totals = [max(float(r[f"r{k}"]["oop"]["total_us"]) for k in (0, 1)) for r in rs]
        slow = sum(1 for r in rs if max(float(r[f"r{k}"]["oop"]["max_us"]) for k in (0, 1)) > 1000)
        out.append(
            f"| {mode} | {len(rs)} | {calls} | {sum(c > WARMUP for c in conv)} "
            f"| {min(lookups)}–{max(lookups)} "
            f"| {statistics.median(waits):.1f} [{max(waits):.1f}] "
            f"| {statistics.median(meds):.1f} [{min(meds):.1f}–{max(meds):.1f}] "
            f"| {statistics.median(totals):.0f} [{min(totals):.0f}–{max(totals):.0f}] | {slow} |"
        )
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=4)
    ap.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " + ",".join(MODES))
    ap.add_argument("--json", type=Path, help="append one JSON line per run here")
    ap.add_argument("--summarize", type=Path, help="print the table of the runs in this JSON-lines file only")
    a = ap.parse_args()
    modes = [m.strip() for m in a.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad:
        print(f"unknown mode {bad[0]!r}: the modes are {', '.join(MODES)}", file=sys.stderr)
        raise SystemExit(2)
    if a.summarize:
        done = [json.loads(line) for line in a.summarize.read_text().splitlines() if line.strip()]
        print(markdown_table(done, [m for m in MODES if any(r["mode"] == m for r in done)]))
        return
    rows: list[dict[str, Any]] = []
    for rep in range(a.reps):
        order = modes if rep % 2 == 0 else list(reversed(modes))  # interleaved, alternating order
        for mode in order:
            with tempfile.TemporaryDirectory(prefix="autoccl-mcost-") as d:
                r = once(mode, seed=1 + rep, tmp=Path(d))
            r["rep"] = rep
            rows.append(r)
            s = r.get("search", {})
            parts = []
            for k in (0, 1):
                rk, o = r[f"r{k}"], r[f"r{k}"]["oop"]
                parts.append(
                    f"r{k} oop med {o.get('median_us', 0):6.1f} p99 {o.get('p99_us', 0):7.1f}"
                    f" max {o.get('max_us', 0):8.1f} tot {o.get('total_us', 0):8.0f}"
                    f" ip tot {rk['ip'].get('total_us', 0):7.0f} us,"
                    f" final {rk['final_config']} @{rk['last_config_change_call']}"
                )
            print(
                f"rep {rep} {mode:8s} wall {r['wall_s']:.2f}s | "
                + " | ".join(parts)
                + f" | small {s.get('small_task')} conv {s.get('converged_at')} lookups {s.get('lookups')}"
                f" wait {s.get('lookup_us')} us",
                flush=True,
            )
            if a.json:
                with open(a.json, "a") as f:
                    f.write(json.dumps(r) + "\n")
    print("\nthe README's table (markdown):")
    print(markdown_table(rows, modes))
    print("\nper mode, over runs (median [min-max]):")
    for mode in modes:
        rs = [r for r in rows if r["mode"] == mode]
        for rank in (0, 1):
            for w in ("oop", "ip"):
                for k in ("median_us", "p99_us", "max_us", "total_us"):
                    v = [float(r[f"r{rank}"][w].get(k, 0)) for r in rs]
                    med = statistics.median(v)
                    print(f"  {mode:8s} r{rank} {w:3s} {k:9s} {med:9.1f} [{min(v):.1f}-{max(v):.1f}]")
        finals = sorted({(r["r0"]["final_config"], r["r0"]["last_config_change_call"]) for r in rs})
        print(f"  {mode:8s} decisions (final config, last change call): {finals}")


if __name__ == "__main__":
    main()
