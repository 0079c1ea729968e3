"""The GPU-result readers under benchmarks/nccl_tests (they run on the GPU machine; checked here on synthetic
input)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[2] / "benchmarks" / "nccl_tests"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, TOOLS / f"{name}.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_kernel_gaps_reads_window_gap_and_period(tmp_path: Path) -> None:
    kg = load("kernel_gaps")
    # two ranks, kernels of 30 us started every 50 us; rank 1's clock 2 us ahead; call 3 of rank 1 untimed
    path = tmp_path / "t.jsonl"
    with path.open("w") as f:
        for rank in (0, 1):
            for k in range(5):
                if rank == 1 and k == 3:
                    continue
                rec = {
                    "ev": "time",
                    "comm": "a",
                    "rank": rank,
                    "coll": "allreduce",
                    "bytes": 4 << 20,
                    "call": k,
                    "gpu_us": 30.0,
                    "nccl_algo": "TREE",
                    "nccl_proto": "LL128",
                    "nccl_channels": 37,
                    "t0_ns": k * 50_000 + rank * 2_000,
                }
                f.write(json.dumps(rec) + "\n")
        f.write('{"ev": "time", "torn')  # a killed process's last line
    rows = kg.summarize(kg.load([str(path)]))
    assert len(rows) == 1
    r = rows[0]
    assert r["config"] == "TREE/LL128/37" and r["ranks"] == 2 and r["samples"] == 9
    assert r["kernel_us"] == 30.0 and r["gap_us"] == 20.0 and r["period_us"] == 50.0
    assert r["skew_us"] == 2.0 and r["span_us"] == 32.0  # calls timed on both ranks only


def test_oracle_table_reports_target_cells(tmp_path: Path) -> None:
    plain, oracle = tmp_path / "plain.jsonl", tmp_path / "oracle.jsonl"
    cells = [(c, b) for c in ("allgather", "reducescatter", "allreduce") for b in (4, 16, 64, 256, 1024)]
    with plain.open("w") as p, oracle.open("w") as o:
        for c, mib in cells:
            row = {"launch": "mpi", "coll": c, "bytes": mib << 20, "busbw_gbs": 100.0}
            p.write(json.dumps(row) + "\n")
            better = {
                **row,
                "busbw_gbs": 121.0 if mib == 4 else 100.0,
                "algo": "ring",
                "proto": "ll128",
                "channels": 16,
            }
            o.write(json.dumps(better) + "\n")
        o.write(json.dumps({"summary": True}) + "\n")
    out = subprocess.run(
        [sys.executable, str(TOOLS / "oracle_table.py"), str(oracle), str(plain), "--launch", "mpi"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    # three cells at 1.21x, twelve at 1.0x (NCCL's own choice is a candidate): 1.21 ** (3 / 15)
    assert "target cells (15): geometric mean oracle/default = 1.039, min = 1.000" in out


def test_rank_windows_counts_the_shortest_rank_and_medians_per_config(tmp_path: Path) -> None:
    # 3 ranks; calls 0-3 on NCCL's choice with windows 50/60/70 (rank 0 shortest), call 4 forced with equal
    # windows (not counted: no rank differs by > 15 %)
    path = tmp_path / "t.jsonl"
    with path.open("w") as f:
        for k in range(5):
            forced = k == 4
            call = {"ev": "call", "rank": 0, "coll": "allgather", "bytes": 1024, "call": k}
            call.update({"algo": "ring", "proto": "ll", "channels": 8} if forced else {"algo": None})
            f.write(json.dumps(call) + "\n")
            for rank in range(3):
                us = 40.0 if forced else 50.0 + 10 * rank
                rec = {"ev": "time", "rank": rank, "coll": "allgather", "bytes": 1024, "call": k}
                f.write(json.dumps({**rec, "gpu_us": us}) + "\n")
    out = subprocess.run(
        [sys.executable, str(TOOLS / "rank_windows.py"), str(tmp_path), "--task", "allgather:1024"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "shortest window by rank {0: 4}, rank 0 100% of 4" in out, out
    assert "NCCL's choice: 4 calls, median window per rank 50 / 60 / 70 us" in out, out
    assert "ring/ll/8: 1 calls, median window per rank 40 / 40 / 40 us" in out, out


def test_cold_pass_cost_splits_the_loop_by_what_ran(tmp_path: Path) -> None:
    """NCCL's choice at 100 us; ring/simple on 64 channels at 90 (the best widest probe); tree/simple on 64
    at 120 (more than 3 % behind: a lost pair) and on 16 at 150 (a narrower point of it); ring/simple on 32 at
    95. Calls 20-29 of the window run 4 of NCCL's, 2 widest, 2 lost-narrower and 2 leading-narrower."""
    cpc = load("cold_pass_cost")
    plan = [(None, 100.0)] * 6 + [(("ring", "simple", 64), 90.0)] * 3 + [(("tree", "simple", 64), 120.0)] * 3
    plan += [(("tree", "simple", 16), 150.0)] * 3 + [(("ring", "simple", 32), 95.0)] * 3 + [(None, 100.0)] * 2
    window = (
        [(None, 100.0)] * 4 + [(("ring", "simple", 64), 90.0)] * 2 + [(("tree", "simple", 16), 150.0)] * 2
    )
    window += [(("ring", "simple", 32), 95.0)] * 2
    calls = plan + window
    assert len(plan) == 20
    folder = tmp_path / "online"
    folder.mkdir()
    with (folder / "p0_all_reduce_single.vm.1.jsonl").open("w") as f:
        for k, (cfg, us) in enumerate(calls):
            algo, proto, ch = cfg if cfg else (None, None, 0)
            base = {"comm": "a", "rank": 0, "coll": "allreduce", "bytes": 64 << 20, "call": k}
            f.write(json.dumps({"ev": "call", **base, "algo": algo, "proto": proto, "channels": ch}) + "\n")
            f.write(json.dumps({"ev": "time", **base, "gpu_us": us}) + "\n")
            f.write(
                json.dumps({"ev": "time", **base, "rank": 1, "gpu_us": 1e6}) + "\n"
            )  # not rank 0: ignored
    acc = cpc.account(
        cpc.task_calls(folder / "p0_all_reduce_single.vm.1.jsonl")[("allreduce", 64 << 20)], 20, 29, 0.03
    )
    assert acc["counts"] == {"nccl": 4, "widest": 2, "narrower, lost": 2, "narrower, leading": 2}
    # excess over 10 calls x 100 us: widest 2 x -10, lost 2 x +50, leading 2 x -5
    assert acc["excess"]["widest"] == -0.02
    assert acc["excess"]["narrower, lost"] == 0.1
    assert acc["excess"]["narrower, leading"] == -0.01
    assert abs(acc["loop"] - 1.07) < 1e-12
    assert acc["missed"] == []
    out = subprocess.run(
        [sys.executable, str(TOOLS / "cold_pass_cost.py"), str(folder), "--pass", "0", "--window", "20-29"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "mean over 1 tasks: loop 1.070x" in out and "narrower, lost +10.00 %" in out


def test_cold_pass_cost_says_when_no_timed_loop_searched(tmp_path: Path) -> None:
    """Table mode's first pass: every call NCCL's choice (no forced configuration), so no task is listed and
    the report's last line says why instead of ending on the table's header (bench.sh prints that line)."""
    folder = tmp_path / "table-warm"
    folder.mkdir()
    with (folder / "p0_all_reduce_mpi.vm.1.jsonl").open("w") as f:
        for k in range(30):
            base = {"comm": "a", "rank": 0, "coll": "allreduce", "bytes": 64 << 20, "call": k}
            f.write(json.dumps({"ev": "call", **base, "algo": None, "proto": None, "channels": 0}) + "\n")
    out = subprocess.run(
        [sys.executable, str(TOOLS / "cold_pass_cost.py"), str(folder), "--pass", "0"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip().splitlines()[-1] == "no task searched in the first pass's timed loops", out


def test_calls_by_pair_counts_rank_0_pass_by_pass(tmp_path: Path) -> None:
    cb = load("calls_by_pair")

    def call(rank: int, algo: str | None, proto: str | None) -> dict[str, object]:
        return {"ev": "call", "rank": rank, "coll": "allreduce", "algo": algo, "proto": proto}

    def task(searched: int, skipped: int) -> dict[str, object]:
        return {
            "ev": "task",
            "rank": 0,
            "search_samples": searched,
            "skipped_behind": skipped,
            "recorded_starts": 1,
        }

    cold = [call(0, "ring", "ll"), call(0, None, None), call(0, "ring", "simple"), task(3, 0)]
    warm = [call(0, None, None), call(0, "ring", "simple"), task(0, 1)]
    for name, recs in (("p0_all_reduce_mpi.vm.1.jsonl", cold), ("p1_all_reduce_mpi.vm.2.jsonl", warm)):
        lines = [json.dumps(r) for r in recs] + [json.dumps(call(1, "ring", "ll")), '{"ev": "ca']
        (tmp_path / name).write_text("\n".join(lines) + "\n")  # rank 1's call and a torn line: not counted
    (tmp_path / "p1_all_reduce_single.vm.3.jsonl").write_text(json.dumps(call(0, None, None)) + "\n")
    rows = cb.count(tmp_path)
    assert rows[(0, "mpi")]["calls"] == 3
    assert rows[(0, "mpi")]["by_pair"] == {"ring/ll": 1, "nccl": 1, "ring/simple": 1}
    one = rows[(1, "mpi")]
    assert one["by_pair"]["ring/ll"] == 0 and one["skipped_behind"] == 1 and one["sampled"] == 0
    assert one["recorded_starts"] == 1 and rows[(1, "single")]["calls"] == 1  # launch kinds apart
    assert rows[(1, "single")]["recorded_starts"] is None  # no task record with the field: unknown, not 0
    table = cb.markdown(rows)
    assert "| 0 | mpi | 3 | 1 | 1 | 1 | 1 of 1 | 0 | 1 |" in table, table
    assert "| 1 | mpi | 2 | 1 | 0 | 1 | 0 of 1 | 1 | 1 |" in table, table
    out = subprocess.run(
        [sys.executable, str(TOOLS / "calls_by_pair.py"), str(tmp_path / "none")],
        capture_output=True,
        text=True,
    )
    assert out.returncode != 0 and "no p<pass>_*.jsonl traces" in out.stderr


def test_config_sweep_matches_what_was_forced_with_what_nccl_ran(tmp_path: Path) -> None:
    """A forced call that NCCL ran as forced, one it ran otherwise, one NCCL refused; nccl-tests' wrong values
    and its out-of-bounds line; a rank that applied something else (divergent)."""
    cs = load("config_sweep")
    out = tmp_path / "ring"
    (out / "logs").mkdir(parents=True)
    (out / "traces" / "ring-ll").mkdir(parents=True)
    (out / "logs" / "p0_mpi_all_reduce_ring-ll.log").write_text(
        "cmd\n# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 1.2\n"
    )
    rows = [
        {"bytes": b, "count": b // 4, "dtype": d, "oop_wrong": 0, "ip_wrong": w}
        for b, d, w in ((1000, "float", 0), (1000, "half", 2), (8000, "float", 0))
    ]
    launch = {"pass": 0, "launch": "mpi", "coll": "all_reduce", "mode": "ring-ll", "rc": 0, "rows": rows}
    launch |= {"data_errors": 2, "log": "logs/p0_mpi_all_reduce_ring-ll.log"}
    (out / "launches.jsonl").write_text(json.dumps(launch) + "\n")
    recs = []
    for rank in (0, 1):
        for k, (applied, refused, ran) in enumerate(
            (
                (("ring", "ll", 0), False, ("RING", "LL", 2)),
                (("ring", "ll", 0), False, ("RING", "SIMPLE", 2)),  # NCCL ran something else
                (("ring", "ll", 8), False, ("RING", "LL", 1)),  # fewer channels than applied
                (("tree", "ll", 0), True, ("RING", "LL", 2)),  # refused: NCCL's choice stood
            )
        ):
            base = {"comm": "c", "rank": rank, "coll": "allreduce", "bytes": 1000, "pipe": 0, "call": k}
            algo = "pat" if (rank, k) == (1, 0) else applied[0]  # rank 1 applied another pair on call 0
            call = {"ev": "call", **base, "algo": algo, "proto": applied[1], "channels": applied[2]}
            if refused:
                call["refused"] = True
            recs.append(call)
            nccl = {"nccl_algo": ran[0], "nccl_proto": ran[1], "nccl_channels": ran[2]}
            recs.append({"ev": "time", **base, **nccl})
    (out / "traces" / "ring-ll" / "p0_all_reduce_mpi.vm.1.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in recs)
    )
    (row,) = cs.summarise([out])
    assert row["rows"] == 3 and row["sizes"] == 2 and row["dtypes"] == ["float", "half"]
    assert row["data_errors"] == 2 and row["out_of_bounds"] == 0
    assert (row["calls"], row["refused"], row["timed"]) == (8, 2, 8)
    assert row["timed_as_forced"] == 1 and row["timed_otherwise"] == 3 and row["timed_refused"] == 2
    assert row["timed_fewer_channels"] == 2
    assert row["ran"] == {"ring/ll/2": 4, "ring/simple/2": 2, "ring/ll/1": 2}
    assert row["divergent_calls"] == 1
    table = cs.markdown([row])
    assert "| ring-ll | all_reduce | 0 | 3 (2 sizes) | 2 | 2 | 0 | 8 | 2 | 1 / 2 / 3 / 2 |" in table, table
    assert "wrong values: 2" in table and "divergent calls: 1" in table
    cmd = [sys.executable, str(TOOLS / "config_sweep.py"), str(tmp_path / "none")]
    missing = subprocess.run(cmd, capture_output=True, text=True)
    assert missing.returncode != 0 and "no such file" in missing.stderr


def test_launch_levels_counts_averages_at_the_slow_level(tmp_path: Path) -> None:
    """From a bench folder's rows: per mode, the out-of-place and in-place averages of one size above the cut.
    (It iterated over read_launches' (records, unreadable) pair and failed on every folder.)"""

    def launch(mode: str, oop: float, ip: float) -> dict[str, object]:
        row = {"bytes": 1 << 20, "count": 1, "dtype": "float", "oop_time_us": oop, "ip_time_us": ip}
        row |= {"oop_algbw_gbs": 1.0, "oop_busbw_gbs": 1.0, "ip_algbw_gbs": 1.0, "ip_busbw_gbs": 1.0}
        return {"pass": 0, "launch": "single", "coll": "all_reduce", "mode": mode, "rc": 0, "rows": [row]}

    recs = [launch("plain", 14.0, 21.0), launch("online", 21.5, 20.8), launch("plain", 14.2, 14.1)]
    (tmp_path / "launches.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    cmd = [sys.executable, str(TOOLS / "launch_levels.py"), str(tmp_path), "--size", "1M"]
    cmd += ["--threshold", "17.5"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "| plain | 4 | 1 | 14.1 | 21.0 |" in out, out
    assert "| online | 2 | 2 | — | 21.5 |" in out, out


def test_pool_modes_pools_folders_and_filters_untimed_tasks(tmp_path: Path) -> None:
    """Two modes' same-pass ratio per cell, pooled over folders: geomean, the sign of each folder, the
    --passes and --min-bytes filters, and --untimed-only reading tasks.md's `converged at call`."""
    pool = load("pool_modes")

    def folder(name: str, online: dict[str, float], idle: dict[str, float], converged: str) -> Path:
        d = tmp_path / name
        d.mkdir()
        cells = [
            {"launch": "mpi", "coll": "all_reduce", "bytes": 4 << 20,
             "modes": {"online": {"ratio_by_pass": online}, "idle": {"ratio_by_pass": idle}}},
            {"launch": "mpi", "coll": "all_reduce", "bytes": 1 << 20,  # below --min-bytes
             "modes": {"online": {"ratio_by_pass": {"1": 0.1}}, "idle": {"ratio_by_pass": {"1": 1.0}}}},
        ]  # fmt: skip
        (d / "summary.json").write_text(json.dumps({"baseline": "plain", "cells": cells}))
        head = "| pass | launch | collective | size | mode | pinned | converged at call |\n"
        head += "| ---: | --- | --- | ---: | --- | --- | ---: |\n"
        rows = [f"| {p} | mpi | all_reduce | 4 MiB | online | NCCL's choice | {converged} |" for p in online]
        (d / "tasks.md").write_text(head + "\n".join(rows) + "\n")
        return d

    a = folder("a", {"0": 0.5, "1": 0.9, "2": 0.99}, {"0": 1.0, "1": 1.0, "2": 1.1}, "0")
    b = folder("b", {"0": 0.5, "1": 1.2}, {"0": 1.0, "1": 1.0}, "14")
    ra = pool.folder_result(a, "online", "idle", 4 << 20, "warm", False)
    assert ra is not None and len(ra.logs) == 2  # pass 0 and the 1 MiB cell left out
    assert abs(ra.geomean - (0.9 * 0.9) ** 0.5) < 1e-9
    cold = pool.folder_result(a, "online", "idle", 4 << 20, "cold", False)
    assert cold is not None and abs(cold.geomean - 0.5) < 1e-9
    assert pool.folder_result(b, "online", "idle", 4 << 20, "warm", True) is None  # converged at call 14
    rb = pool.folder_result(b, "online", "idle", 4 << 20, "warm", False)
    assert rb is not None
    p = pool.pooled([ra, rb], resamples=2000, seed=3)
    assert abs(p["geomean"] - (0.9 * 0.9 * 1.2) ** (1 / 3)) < 1e-9
    assert p["ci_low"] <= p["geomean"] <= p["ci_high"]
    assert pool.sign_test_p(9, 0) < 0.005 and pool.sign_test_p(2, 2) == 1.0
    cmd = [
        sys.executable,
        str(TOOLS / "pool_modes.py"),
        "--mode",
        "online",
        "--against",
        "idle",
        str(a),
        str(b),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    assert "pooled over 2 folders, 3 cells × passes" in out, out
    assert "one vote each: 1 below 1, 1 above" in out, out
