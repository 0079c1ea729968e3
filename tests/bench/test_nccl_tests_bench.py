"""`autoccl bench nccl-tests` against a stand-in for nccl-tests (no GPU): interleaving, resuming, the
ratio statistics, the data-error and failure reporting."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autoccl.bench import nccl_tests as NT
from autoccl.cli import main

# Prints nccl-tests-like rows; busbw 100 GB/s plain, x TUNED_GAIN when the plugin is loaded (autoccl run
# sets NCCL_TUNER_PLUGIN), one wrong element per row when FAKE_WRONG is set. Appends its launch to a log.
# With FAKE_NO_TUNER under the plugin it prints the library's WARN where its tuner cannot engage (NCCL prints
# it at NCCL_DEBUG=WARN) and, with a trace, traces the refusal too.
# With FAKE_FAIL_TUNED a tuned launch exits 3.
FAKE = r"""#!PYTHON
import json, os, sys
warn = os.environ.get("NCCL_DEBUG") == "WARN"
if os.environ.get("FAKE_NO_TUNER") and "NCCL_TUNER_PLUGIN" in os.environ and warn:
    why = os.environ["FAKE_NO_TUNER"]
    line = f"NCCL WARN autoccl: comm 00000000000000aa rank 0: {why}; behaving as no tuner"
    print("host:1:2 [0] " + line, file=sys.stderr)
if os.environ.get("FAKE_NO_TUNER") and os.environ.get("AUTOCCL_TRACE"):
    with open(f"{os.environ['AUTOCCL_TRACE']}.fake.{os.getpid()}.jsonl", "w") as t:
        rec = {"ev": "no_tuner", "comm": "00000000000000aa", "rank": 0, "why": os.environ["FAKE_NO_TUNER"]}
        t.write(json.dumps(rec) + "\n")
args = sys.argv[1:]
def arg(flag, default):
    return args[args.index(flag) + 1] if flag in args else default
b, e, f = int(arg("-b", "1048576")), int(arg("-e", "1048576")), int(arg("-f", "2"))
tuned = "NCCL_TUNER_PLUGIN" in os.environ
with open(os.environ["FAKE_LOG"], "a") as log:
    log.write(("tuned" if tuned else "plain") + " " + os.path.basename(sys.argv[0]) + "\n")
if tuned and os.environ.get("FAKE_FAIL_TUNED"):
    sys.exit(3)
print("# nccl-tests stand-in")
print("#  size  count  type  redop  root  time  algbw  busbw #wrong  time  algbw  busbw #wrong")
size = b
gain = float(os.environ.get("TUNED_GAIN", "1.1")) if tuned else 1.0
wrong = 1 if os.environ.get("FAKE_WRONG") else 0
while size <= e:
    bw = 100.0 * gain
    t = size / bw / 1e3
    cols = f"{t:7.2f}  {bw:6.2f}  {bw:6.2f}  {wrong:6d}"
    print(f"{size:12d}  {size // 4:12d}     float     sum      -1  {cols}  {cols}")
    size *= f
"""


def _fake_bin(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for coll in ("all_reduce", "all_gather"):
        exe = bin_dir / f"{coll}_perf"
        exe.write_text(FAKE.replace("PYTHON", sys.executable))
        exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _invoke(args: list[str], env: dict[str, str]) -> object:
    return CliRunner().invoke(main, ["bench", "nccl-tests", *args], env=env, catch_exceptions=False)


def test_interleaved_passes_ratios_and_resume(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "launches.log"
    out = tmp_path / "out"
    env = {"FAKE_LOG": str(log), "TUNED_GAIN": "1.1"}
    common = ["--bin", str(bin_dir), "--gpus", "2", "-c", "all_reduce,all_gather", "-b", "1M", "-e", "8M"]
    r = _invoke([*common, "-p", "2", "-m", "plain", "-m", "online", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    # plain and tuned alternate launch by launch, pass after pass; the second pass starts with the tuned mode
    # (the modes' order rotates), so neither always runs first on a collective
    assert log.read_text().splitlines() == [
        "plain all_reduce_perf",
        "tuned all_reduce_perf",
        "plain all_gather_perf",
        "tuned all_gather_perf",
        "tuned all_reduce_perf",
        "plain all_reduce_perf",
        "tuned all_gather_perf",
        "plain all_gather_perf",
    ]
    positions = [json.loads(x)["position"] for x in (out / "launches.jsonl").read_text().splitlines()]
    assert positions == [0, 1, 0, 1, 0, 1, 0, 1]
    assert "(rotate order)" in (out / "summary.md").read_text().splitlines()[0]
    summary = json.loads((out / "summary.json").read_text())
    o = summary["overall"]["online/single"]
    assert abs(o["geomean_ge_min_bytes"] - 1.1) < 1e-6
    assert o["cells"] == 8 and o["cells_below_0.98"] == 0 and o["data_errors"] == 0
    assert (out / "ratio.png").stat().st_size > 0
    assert "online" in (out / "summary.md").read_text()
    # a rerun into the same folder keeps what was measured and launches nothing new
    before = len(log.read_text().splitlines())
    r = _invoke([*common, "-p", "2", "-m", "plain", "-m", "online", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0
    assert len(log.read_text().splitlines()) == before
    # --report-only needs no nccl-tests build and keeps the run's own header, not this command's defaults
    first_line = (out / "summary.md").read_text().splitlines()[0]
    r = _invoke(["--report-only", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert len(log.read_text().splitlines()) == before
    assert (out / "summary.md").read_text().splitlines()[0] == first_line
    assert "-e 8" in first_line or "8388608" in first_line
    # a folder holding only launches.jsonl: the header says what the launches ran, not the command's defaults
    only = tmp_path / "only-launches"
    only.mkdir()
    (only / "launches.jsonl").write_text((out / "launches.jsonl").read_text())
    r = _invoke(["--report-only", "-o", str(only), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    header = (only / "summary.md").read_text().splitlines()[0]
    assert "..8388608 " in header and "1073741824" not in header and "0 GPUs" not in header, header
    assert (
        abs(
            json.loads((out / "summary.json").read_text())["overall"]["online/single"]["geomean_ge_min_bytes"]
            - 1.1
        )
        < 1e-6
    )
    # without it, --bin is required, in one sentence
    r = CliRunner().invoke(main, ["bench", "nccl-tests", "-o", str(tmp_path / "o2")])
    assert r.exit_code != 0 and "--bin DIR is required" in r.output


def test_slower_mode_and_data_errors_are_reported(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path)
    env = {"FAKE_LOG": str(tmp_path / "l"), "TUNED_GAIN": "0.9", "FAKE_WRONG": "1"}
    out = tmp_path / "out"
    args = ["--bin", str(bin_dir), "--gpus", "2", "-c", "all_reduce", "-b", "4M", "-e", "4M", "-p", "1"]
    r = CliRunner().invoke(
        main, ["bench", "nccl-tests", *args, "-m", "plain,online", "-o", str(out), "--no-progress"], env=env
    )
    assert r.exit_code != 0
    assert "data error" in r.output
    o = json.loads((out / "summary.json").read_text())["overall"]["online/single"]
    assert o["cells_below_0.98"] == 1 and o["data_errors"] == 2


def test_a_tuner_that_did_not_engage_is_reported(tmp_path: Path) -> None:
    why = "a communicator on 2 nodes cannot use autoccl run (this host's loopback address) 127.0.0.1:1"
    out = tmp_path / "out"
    args = [
        "--bin",
        str(_fake_bin(tmp_path)),
        "--gpus",
        "2",
        "-c",
        "all_reduce",
        "-b",
        "4M",
        "-e",
        "4M",
        "-p",
        "2",
    ]
    env = {"FAKE_LOG": str(tmp_path / "l"), "TUNED_GAIN": "1.0", "FAKE_NO_TUNER": why}
    r = _invoke(
        [*args, "-m", "plain", "-m", "online", "-m", "observe", "--trace", "-o", str(out), "--no-progress"],
        env,
    )
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    overall = json.loads((out / "summary.json").read_text())["overall"]
    o = overall["online/single"]
    assert (o["launches_without_tuner"], o["launches"], o["no_tuner"]) == (2, 2, [why])
    text = (out / "summary.md").read_text()
    assert "The tuner did not engage" in text and f"online, single: 2 of 2 launches; {why}" in text
    # without a trace, from the WARN the bench asks NCCL to print
    out3 = tmp_path / "out3"
    r = _invoke([*args, "-m", "plain", "-m", "online", "-o", str(out3), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    o = json.loads((out3 / "summary.json").read_text())["overall"]["online/single"]
    assert (o["launches_without_tuner"], o["no_tuner"]) == (2, [why])
    # a launch whose traces and output hold no refusal is not reported as one
    env.pop("FAKE_NO_TUNER")
    out2 = tmp_path / "out2"
    r = _invoke([*args, "-m", "plain", "-m", "online", "--trace", "-o", str(out2), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert (
        json.loads((out2 / "summary.json").read_text())["overall"]["online/single"]["launches_without_tuner"]
        == 0
    )
    assert "did not engage" not in (out2 / "summary.md").read_text()


def test_losses_are_told_from_plain_spread() -> None:
    """A cell below 0.98x counts as a loss beyond plain's spread only when it lost more than plain moved."""

    def rec(pass_no: int, mode: str, bw: dict[int, float]) -> dict[str, object]:
        rows = [{"bytes": b, "oop_busbw_gbs": v} for b, v in bw.items()]
        return {
            "pass": pass_no,
            "launch": "single",
            "coll": "all_reduce",
            "mode": mode,
            "rc": 0,
            "rows": rows,
        }

    small, big = 1 << 20, 64 << 20
    records = [
        # plain moves 50 % at 1 MiB between passes and 1 % at 64 MiB
        rec(0, "plain", {small: 20.0, big: 300.0}),
        rec(1, "plain", {small: 30.0, big: 303.0}),
        # online: 1 MiB at 0.8x of each pass's plain (inside 50 %), 64 MiB at 0.9x (outside 1 %)
        rec(0, "online", {small: 16.0, big: 270.0}),
        rec(1, "online", {small: 24.0, big: 272.7}),
    ]
    s = NT.summarize(records)
    o = s["overall"]["online/single"]
    assert o["cells_below_0.98"] == 2
    assert [(x["bytes"], round(x["ratio"], 3)) for x in o["losses_beyond_spread"]] == [(big, 0.9)]
    md = NT.markdown(s)
    assert "| 2 of 2 | 1 |" in md
    assert "- online, single: all_reduce 64 MiB 0.900× (plain moved 1.0 %)" in md
    # one pass: no spread is known, so every cell below 0.98x is listed
    one = NT.summarize([r for r in records if r["pass"] == 0])
    assert len(one["overall"]["online/single"]["losses_beyond_spread"]) == 2


def test_several_rows_of_one_size_are_said() -> None:
    """--nt-args '-d all' (or -o all, -N 2) prints several rows of each size, which the cells cannot tell
    apart (they compare one row a size): the summary says how many launches did, not silently keeping the
    last."""

    def rec(pass_no: int, mode: str, rows: list[float]) -> dict[str, object]:
        return {"pass": pass_no, "launch": "single", "coll": "all_reduce", "mode": mode, "rc": 0,
                "rows": [{"bytes": 8 << 20, "oop_busbw_gbs": v} for v in rows]}  # fmt: skip

    one = [rec(0, "plain", [100.0]), rec(0, "online", [110.0])]
    assert NT.summarize(one)["launches_with_several_rows_per_size"] == 0
    assert "several rows of one size" not in NT.markdown(NT.summarize(one))
    several = [rec(0, "plain", [100.0, 50.0]), rec(0, "online", [110.0, 60.0])]
    s = NT.summarize(several)
    assert s["launches_with_several_rows_per_size"] == 2
    assert "**2 launches printed several rows of one size**" in NT.markdown(s)


def test_the_ratio_apart_by_place_in_the_pass() -> None:
    """A machine that slows over a pass makes whichever mode runs second look slower: the summary gives the
    geomean apart for the passes where the mode ran before the baseline and those where it ran after."""

    def rec(pass_no: int, coll: str, mode: str, position: int, bw: float) -> dict[str, object]:
        rows = [{"bytes": 8 << 20, "oop_busbw_gbs": bw}]
        return {"pass": pass_no, "launch": "mpi", "coll": coll, "mode": mode, "rc": 0, "rows": rows,
                "position": position}  # fmt: skip

    records = []
    for p in range(4):
        first = "plain" if p % 2 == 0 else "online"
        for coll in ("all_gather", "all_reduce"):
            # the second launch of a pair runs at 0.8x, whatever its mode
            records += [
                rec(p, coll, first, 0, 100.0),
                rec(p, coll, "online" if first == "plain" else "plain", 1, 80.0),
            ]
    s = NT.summarize(records)
    place = s["overall"]["online/mpi"]["by_place"]
    # per pass: 0.8x in the passes online ran second, 1.25x where it ran first
    assert s["overall"]["online/mpi"]["geomean_by_pass"] == pytest.approx(
        {"0": 0.8, "1": 1.25, "2": 0.8, "3": 1.25}
    )
    assert "- online, mpi: 0.800 / 1.250 / 0.800 / 1.250" in NT.markdown(s)
    # pass 0 (the cold one, where the baseline leads under any order) is left out
    assert place["before"]["passes"] == [1, 3] and place["after"]["passes"] == [2]
    assert abs(place["before"]["geomean"] - 1.25) < 1e-9 and abs(place["after"]["geomean"] - 0.8) < 1e-9
    assert "- online, mpi: before 1.250× (passes 1, 3), after 0.800× (passes 2)" in NT.markdown(s)
    # records from before positions were kept: no split, and no line for it
    old = [{k: v for k, v in r.items() if k != "position"} for r in records]
    assert NT.summarize(old)["overall"]["online/mpi"]["by_place"] == {}
    assert "By place" not in NT.markdown(NT.summarize(old))


def test_a_stalled_average_is_reported_against_its_median() -> None:
    """One launch whose 40-call average held a stall stands out as max/median of the cell's averages over
    passes, per mode and launch, with the cell and placement; plain's own figure is beside it."""

    def rec(pass_no: int, mode: str, oop_us: float, ip_us: float) -> dict[str, object]:
        row = {"bytes": 1 << 20, "oop_busbw_gbs": 1000.0 / oop_us, "oop_time_us": oop_us, "ip_time_us": ip_us}
        cell = {"launch": "mpi", "coll": "reduce_scatter"}
        return {"pass": pass_no, **cell, "mode": mode, "rc": 0, "rows": [row]}

    records = [
        rec(0, "plain", 12.0, 12.0),
        rec(1, "plain", 13.0, 12.5),
        rec(2, "plain", 12.5, 15.0),
        rec(0, "online", 12.0, 12.0),
        rec(1, "online", 12.2, 24.0),  # a stall in one in-place average: 2x the median of 12.0, 24.0, 12.1
        rec(2, "online", 12.4, 12.1),
    ]
    s = NT.summarize(records)
    o = s["overall"]["online/mpi"]["largest_average_over_median"]
    assert o["placement"] == "ip" and o["coll"] == "reduce_scatter" and o["bytes"] == 1 << 20
    assert abs(o["factor"] - 24.0 / 12.1) < 1e-9
    base = s["baseline_largest_average_over_median"]["mpi"]
    assert abs(base["factor"] - 15.0 / 12.5) < 1e-9
    md = NT.markdown(s)
    assert "| 1.98× (reduce_scatter 1 MiB in-place) |" in md
    assert "plain's own largest average over its median: mpi 1.20× (reduce_scatter 1 MiB in-place)." in md


def test_bad_inputs_are_one_sentence(tmp_path: Path) -> None:
    bin_dir = _fake_bin(tmp_path)
    cases = [
        (["--bin", str(tmp_path / "nope")], "no such directory"),
        (["--bin", str(bin_dir), "-c", "all_to_everyone"], "unknown collective"),
        (["--bin", str(bin_dir), "-c", "reduce"], "missing or not executable"),
        (["--bin", str(bin_dir), "-m", "turbo"], "unknown mode"),
        (["--bin", str(bin_dir), "--launch", "ssh"], "expected single, mpi"),
        (["--bin", str(bin_dir), "-b", "lots"], "is not a number of bytes"),
        (["--bin", str(bin_dir), "-b", "8M", "-e", "1M"], "--begin <= --end"),
        (["--bin", str(bin_dir), "--order", "random"], "'random' is not one of 'rotate', 'fixed'"),
    ]
    base = ["bench", "nccl-tests", "--gpus", "2", "-c", "all_reduce", "-o", str(tmp_path / "o")]
    for args, words in cases:
        r = CliRunner().invoke(main, [*base, *args])
        assert r.exit_code != 0 and words in r.output, (args, r.output)
        assert r.exception is None or isinstance(r.exception, SystemExit), r.exception


def test_a_missing_bin_is_named_before_the_gpus_are_counted(tmp_path: Path) -> None:
    """Without -g the GPUs are counted with nvidia-smi; a wrong --bin is the problem to name, not nvidia-smi
    (absent here: PATH holds no nvidia-smi)."""
    args = [
        "bench",
        "nccl-tests",
        "--bin",
        str(tmp_path / "nope"),
        "-c",
        "all_reduce",
        "-o",
        str(tmp_path / "o"),
    ]
    r = CliRunner().invoke(main, args, env={"PATH": str(tmp_path)})
    assert r.exit_code != 0 and "no such directory" in r.output and "nvidia-smi" not in r.output, r.output


def _plain_and_online(nbytes: int) -> list[dict[str, Any]]:
    """Two passes of one all_reduce size, plain NCCL and online (1.1x plain's busbw)."""
    return [
        {"pass": p, "launch": "single", "coll": "all_reduce", "mode": m, "rc": 0,
         "rows": [{"bytes": nbytes, "oop_busbw_gbs": 100.0 * (1.1 if m == "online" else 1.0)}]}
        for p in range(2)
        for m in ("plain", "online")
    ]  # fmt: skip


def test_no_cell_at_the_geomean_size_says_so_not_nan() -> None:
    """Sizes all below 4 MiB leave the geomean nothing to average: the table says so, not "nan× (nan–nan)"."""
    recs = _plain_and_online(1 << 20)
    md = NT.markdown(NT.summarize(recs))
    row = next(x for x in md.splitlines() if x.startswith("| online | single |"))
    assert "— (no cell ≥ 4 MiB)" in row and "nan" not in md, md


def _strict(text: str) -> object:
    """JSON as jq or JSON.parse read it: NaN and Infinity are errors."""

    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_summary_json_is_strict_with_the_reason_for_a_missing_geomean(tmp_path: Path) -> None:
    """Sizes all below 4 MiB: summary.json holds null for the geomean and its interval, never NaN (which jq
    and JSON.parse refuse), and says why in the words summary.md uses; every line of launches.jsonl is strict
    too, and --report-only still reads a launches.jsonl of an earlier version that holds NaN."""
    bin_dir = _fake_bin(tmp_path)
    out = tmp_path / "out"
    env = {"FAKE_LOG": str(tmp_path / "log")}
    args = ["--bin", str(bin_dir), "-g", "2", "-c", "all_reduce", "-b", "1M", "-e", "2M", "-p", "1"]
    r = _invoke([*args, "-m", "plain", "-m", "online", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    summary = _strict((out / "summary.json").read_text())
    assert isinstance(summary, dict)
    o = summary["overall"]["online/single"]
    assert o["geomean_ge_min_bytes"] is None and o["geomean_ci95"] == [None, None]
    assert o["geomean_null_reason"] == "no cell ≥ 4 MiB"
    assert "— (no cell ≥ 4 MiB)" in (out / "summary.md").read_text()
    for line in (out / "launches.jsonl").read_text().splitlines():
        _strict(line)
    # a launch record of an earlier version with NaN in it (a trace's number): read, and written back strict
    recs = [json.loads(x) for x in (out / "launches.jsonl").read_text().splitlines()]
    recs[0]["rows"][0]["ip_time_us"] = float("nan")
    (out / "launches.jsonl").write_text("".join(json.dumps(x) + "\n" for x in recs))
    assert "NaN" in (out / "launches.jsonl").read_text()
    r = _invoke(["--report-only", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    _strict((out / "summary.json").read_text())


def test_a_ratio_over_a_pass_with_a_geomean_and_no_interval_is_not_called_missing() -> None:
    """The markdown reads a summary with null (from its JSON) as it reads one with NaN: a geomean without an
    interval keeps its value, a geomean without a value names its reason."""
    recs = _plain_and_online(8 << 20)
    s = NT.summarize(recs)
    s["overall"]["online/single"]["geomean_ci95"] = [None, None]
    row = next(x for x in NT.markdown(s).splitlines() if x.startswith("| online | single |"))
    assert "1.100× (no interval)" in row, row
    s["overall"]["online/single"]["geomean_ge_min_bytes"] = None
    s["overall"]["online/single"]["geomean_null_reason"] = "no cell ≥ 4 MiB with a ratio above 0"
    row = next(x for x in NT.markdown(s).splitlines() if x.startswith("| online | single |"))
    assert "— (no cell ≥ 4 MiB with a ratio above 0)" in row, row


def test_mode_syntax() -> None:
    m = NT.parse_mode("kclock:--mode observe AUTOCCL_CLOCK=kernel")
    assert m.run_args == ("--mode", "observe") and dict(m.env) == {"AUTOCCL_CLOCK": "kernel"}
    p = NT.parse_mode("plain64:plain NCCL_MIN_CTAS=64")
    assert p.plain and dict(p.env) == {"NCCL_MIN_CTAS": "64"}
    env = NT.child_env(p, {**os.environ, "AUTOCCL_MODE": "online", "NCCL_TUNER_PLUGIN": "x"})
    assert "AUTOCCL_MODE" not in env and "NCCL_TUNER_PLUGIN" not in env and env["NCCL_NVLS_ENABLE"] == "0"
    # the idle plugin decides nothing: table mode with no table, without the step guard's coordinator
    idle = NT.parse_mode("idle")
    assert idle.run_args == ("--mode", "table", "--cache-dir", "{empty}")
    assert dict(idle.env) == {"AUTOCCL_GUARD": "off"}


SIZES = dict(begin=1 << 20, end=1 << 20, factor=2, warmup=1, iters=1, passes=1, timeout=10.0)


def test_cache_of_another_mode(tmp_path: Path) -> None:
    bins = tmp_path / "bin"
    bins.mkdir()
    exe = bins / "all_reduce_perf"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    plain, online = NT.parse_mode("plain"), NT.parse_mode("online")
    warm = NT.parse_mode("table-warm:--mode table --cache-dir {cache:online}")

    def plan_of(*modes: NT.Mode) -> NT.Plan:
        return NT.Plan(
            bin_dir=bins,
            out=tmp_path / "o",
            colls=["all_reduce"],
            launches=["single"],
            gpus=2,
            modes=list(modes),
            **SIZES,
        )

    plan_of(plain, online, warm).validate()
    cmd = NT.launch_command(plan_of(plain, online, warm), warm, "all_reduce", "single", 0)
    assert cmd[cmd.index("--cache-dir") + 1] == str(tmp_path / "o" / "cache" / "online-single")
    for bad in (plan_of(plain, warm, online), plan_of(plain, warm)):  # online after it, or none
        with pytest.raises(NT.BenchError, match="cache:online"):
            bad.validate()


def test_pass_order_rotates_and_keeps_a_table_reader_after_its_writer() -> None:
    plain, online, observe = NT.parse_mode("plain"), NT.parse_mode("online"), NT.parse_mode("observe")
    warm = NT.parse_mode("table-warm:--mode table --cache-dir {cache:online}")
    modes = [plain, online, warm, observe]

    def names(p: int, order: str = "rotate") -> list[str]:
        return [m.name for m in NT.pass_order(modes, p, order)]

    # table-warm reads online's table of the same pass: the two take one place, in that order
    assert names(0) == ["plain", "online", "table-warm", "observe"]
    assert names(1) == ["online", "table-warm", "observe", "plain"]
    assert names(2) == ["observe", "plain", "online", "table-warm"]
    assert names(3) == names(0)
    assert all(names(p, "fixed") == names(0) for p in range(5))
    # over three passes each of the three places has led once
    assert sorted(names(p)[0] for p in range(3)) == ["observe", "online", "plain"]
    # a mode reading two modes' tables: the three take one place, the writers in their order, the reader last
    both = NT.parse_mode("both:--mode table --cache-dir {cache:observe} MERGE_FROM={cache:online}")
    two = [plain, online, observe, both]
    assert [m.name for m in NT.pass_order(two, 0)] == ["plain", "online", "observe", "both"]
    assert [m.name for m in NT.pass_order(two, 1)] == ["online", "observe", "both", "plain"]
    # a writer listed before the baseline keeps its place: pass 0 runs the modes as given
    first = [online, plain, warm]
    assert [m.name for m in NT.pass_order(first, 0)] == ["online", "table-warm", "plain"]
    assert [m.name for m in NT.pass_order(first, 1)] == ["plain", "online", "table-warm"]


def test_cross_rank_agreement_counts_divergent_calls() -> None:
    same = {"ev": "call", "comm": "a", "coll": "allreduce", "bytes": 8, "pipe": 1, "algo": "ring"}
    recs = [
        {**same, "rank": 0, "call": 0},
        {**same, "rank": 1, "call": 0},
        {**same, "rank": 0, "call": 1},
        {**same, "rank": 1, "call": 1, "algo": "tree"},
    ]
    a = NT.cross_rank_agreement(recs)
    assert a["calls_compared"] == 2 and a["divergent_calls"] == 1


def test_task_table_says_how_a_small_task_was_judged() -> None:
    """The per-task table shows NCCL's model estimate beside the measured kernel, and whether a small task
    was judged by the model at its first call or by its samples (the margin the model's verdict relies on
    is read off this table on a GPU); NCCL's own choice apart from what the last call ran (a pin's kernel)."""

    def rec(mode: str, busbw: float, pinned: list[dict[str, object]]) -> dict[str, object]:
        rows = [{"bytes": 1 << 20, "oop_busbw_gbs": busbw}, {"bytes": 64 << 20, "oop_busbw_gbs": busbw}]
        return {
            "pass": 0,
            "launch": "single",
            "coll": "all_reduce",
            "mode": mode,
            "rc": 0,
            "rows": rows,
            "pinned": pinned,
        }

    tasks = [
        {"bytes": 1 << 20, "small_task": True, "small_by_model": True, "model_us": 12.34, "converged_at": 0},
        {
            "bytes": 4 << 20,
            "small_task": True,
            "small_by_model": False,
            "model_us": 60.0,
            "default_us": 41.0,
            "best_us": 41.0,
            "converged_at": 6,
        },
        {
            "bytes": 64 << 20,
            "algo": "RING",
            "proto": "LL128",
            "channels": 32,
            "nccl_algo": "RING",
            "nccl_proto": "SIMPLE",
            "nccl_channels": 24,
            "ran_algo": "RING",
            "ran_proto": "LL128",
            "ran_channels": 32,
            "model_us": 300.0,
            "default_us": 310.0,
            "best_us": 290.0,
            "gain": 0.069,
            "converged_at": 120,
        },
    ]
    text = NT.task_table([rec("plain", 100.0, []), rec("online", 105.0, tasks)], {"baseline": "plain"})
    lines = {ln.split("|")[4].strip(): ln for ln in text.splitlines() if ln.startswith("| 0 ")}
    assert "| 12.3 |" in lines["1 MiB"] and "| by NCCL's model |" in lines["1 MiB"]
    assert "| 1.050 |" in lines["1 MiB"]
    assert "| 41.0 → 41.0 | 60.0 |" in lines["4 MiB"] and "| by samples |" in lines["4 MiB"]
    assert "| 310.0 → 290.0 | 300.0 | +6.9 % |" in lines["64 MiB"] and "RING/LL128/32" in lines["64 MiB"]
    # NCCL's own choice (from the calls left to it) beside what the last call ran; "—" where never measured
    assert "| RING/LL128/32 | ring/simple/24 | ring/ll128/32 | 120 |" in lines["64 MiB"]
    assert "| NCCL's choice | — | — | 0 |" in lines["1 MiB"]
    # a record from a plugin before `ran_*`: its `nccl_*` was the last call's kernel, shown as such
    old = {"bytes": 16 << 20, "algo": "RING", "proto": "SIMPLE", "channels": 1, "converged_at": 40}
    old |= {"nccl_algo": "RING", "nccl_proto": "SIMPLE", "nccl_channels": 1}
    text = NT.task_table([rec("plain", 100.0, []), rec("online", 105.0, [old])], {"baseline": "plain"})
    assert "| RING/SIMPLE/1 | — | ring/simple/1 | 40 |" in text


def _two_pass_run(tmp_path: Path) -> Path:
    """A finished run of the stand-in: 2 passes, plain and online, all_reduce 1-8 MiB (8 launches)."""
    out = tmp_path / "out"
    env = {"FAKE_LOG": str(tmp_path / "launches.log")}
    args = [
        "--bin",
        str(_fake_bin(tmp_path)),
        "--gpus",
        "2",
        "-c",
        "all_reduce,all_gather",
        "-b",
        "1M",
        "-e",
        "8M",
    ]
    r = _invoke([*args, "-p", "2", "-m", "plain", "-m", "online", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    return out


def _report_only(out: Path) -> object:
    return CliRunner().invoke(main, ["bench", "nccl-tests", "--report-only", "-o", str(out), "--no-progress"])


def test_report_only_refuses_a_file_without_launches(tmp_path: Path) -> None:
    """An empty launches.jsonl, or one without a readable launch, is one sentence and a failure, not empty
    tables under a header of this command's defaults."""
    for name, text, words in (
        ("empty", "", "(empty)"),
        ("blank", "\n\n", "(empty)"),
        ("torn", '{"mode": "plain", "pass": 0', "(1 unreadable line)"),
        ("not-launches", '[1, 2]\n{"mode": "plain"}\n', "(2 unreadable lines)"),
    ):
        out = tmp_path / name
        out.mkdir()
        (out / "launches.jsonl").write_text(text)
        r = _report_only(out)
        assert r.exit_code == 1, (name, r.output)  # type: ignore[attr-defined]
        assert f"no launches in {out / 'launches.jsonl'} {words}" in r.output, r.output  # type: ignore[attr-defined]
        assert r.output.count("\n") == 1, r.output  # type: ignore[attr-defined]
        assert not (out / "summary.md").exists() and not (out / "summary.json").exists()


def test_report_only_says_how_many_lines_it_skipped(tmp_path: Path) -> None:
    """A malformed line in the middle and a torn last line are left out, and stderr and summary.md say so."""
    out = _two_pass_run(tmp_path)
    lines = (out / "launches.jsonl").read_text().splitlines()
    assert len(lines) == 8
    torn = lines[7][: len(lines[7]) // 2]
    (out / "launches.jsonl").write_text("\n".join([*lines[:3], "NOT JSON {", *lines[3:7], torn]))
    r = _report_only(out)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    note = f"skipped 2 unreadable lines in {out / 'launches.jsonl'}"
    assert note in r.stderr, r.stderr  # type: ignore[attr-defined]
    assert [x for x in r.stderr.splitlines() if "unreadable" in x] == [  # type: ignore[attr-defined]
        f"autoccl bench nccl-tests: {note} (cut short or malformed; their launches are left out)"
    ]
    md = (out / "summary.md").read_text()
    assert "**2 unreadable lines of launches.jsonl skipped**" in md
    assert json.loads((out / "summary.json").read_text())["unreadable_lines"] == 2
    # 7 launches read: pass 1's all_gather lost its last launch (plain: the order rotated), nothing else
    records, unreadable = NT.read_launches(out)
    assert unreadable == 2 and len(records) == 7
    assert (records[-1]["pass"], records[-1]["coll"], records[-1]["mode"]) == (1, "all_gather", "online")
    # a clean file says nothing
    (out / "launches.jsonl").write_text("\n".join(lines) + "\n")
    r = _report_only(out)
    assert r.exit_code == 0 and "unreadable" not in r.output  # type: ignore[attr-defined]
    assert "unreadable" not in (out / "summary.md").read_text()


def test_the_header_counts_the_passes_the_launches_hold(tmp_path: Path) -> None:
    """The header's pass count is the data's, not -p's: a header of 3 passes over 2-pass data is corrected,
    and a run cut to its first pass says 1."""
    out = _two_pass_run(tmp_path)
    first = (out / "summary.md").read_text().splitlines()[0]
    assert "2 interleaved passes (rotate order)" in first, first
    # an earlier summary that claimed 3 passes (written with another -p) over the same launches
    md = (out / "summary.md").read_text()
    (out / "summary.md").write_text(md.replace("2 interleaved passes", "3 interleaved passes", 1))
    r = _report_only(out)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert (out / "summary.md").read_text().splitlines()[0] == first
    # --report-only with -p 5 writes what the data holds, not -p
    r = CliRunner().invoke(main, ["bench", "nccl-tests", "--report-only", "-p", "5", "-o", str(out)])
    assert r.exit_code == 0 and "5 interleaved" not in (out / "summary.md").read_text()  # type: ignore[attr-defined]
    # the launches of pass 0 alone
    lines = (out / "launches.jsonl").read_text().splitlines()
    (out / "launches.jsonl").write_text("\n".join(x for x in lines if json.loads(x)["pass"] == 0) + "\n")
    r = _report_only(out)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert "1 interleaved pass (rotate order)" in (out / "summary.md").read_text().splitlines()[0]
    # a folder with launches.jsonl alone: the header is made of the launches
    only = tmp_path / "only"
    only.mkdir()
    (only / "launches.jsonl").write_text("\n".join(lines) + "\n")
    r = CliRunner().invoke(main, ["bench", "nccl-tests", "--report-only", "-p", "3", "-o", str(only)])
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    header = (only / "summary.md").read_text().splitlines()[0]
    assert "(4 sizes, from launches.jsonl), 2 interleaved passes;" in header, header


def test_a_rerun_after_a_torn_line_sets_it_aside_and_launches_it_again(tmp_path: Path) -> None:
    """A run killed mid-write leaves a torn last line: the next run moves it to launches.jsonl.unreadable
    (nothing lost), launches what it lacks on lines of their own, and its summary leaves nothing out."""
    bin_dir = _fake_bin(tmp_path)
    out = tmp_path / "out"
    env = {"FAKE_LOG": str(tmp_path / "launches.log")}
    args = ["--bin", str(bin_dir), "--gpus", "2", "-c", "all_reduce", "-b", "1M", "-e", "2M", "--no-progress"]
    r = _invoke([*args, "-p", "1", "-o", str(out)], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    torn = '{"pass": 1, "launch": "single", "co'
    with open(out / "launches.jsonl", "a") as f:
        f.write(torn)
    r = _invoke([*args, "-p", "2", "-o", str(out)], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert "set 1 unreadable line" in r.stderr  # type: ignore[attr-defined]
    assert (out / "launches.jsonl.unreadable").read_text() == torn + "\n"
    records, unreadable = NT.read_launches(out)
    assert unreadable == 0 and sorted((x["pass"], x["mode"]) for x in records) == [
        (0, "online"),
        (0, "plain"),
        (1, "online"),
        (1, "plain"),
    ]
    assert "unreadable" not in (out / "summary.md").read_text()
    assert "2 interleaved passes" in (out / "summary.md").read_text().splitlines()[0]


def test_passes_are_those_of_the_baseline() -> None:
    """The header's pass count is what the ratios can cover: passes where the baseline ran to the end."""
    recs = [
        {"pass": p, "mode": m, "rc": 1 if (p, m) == (1, "plain") else 0}
        for p in range(3)
        for m in ("plain", "online")
    ]
    assert NT.passes_in(recs, "plain") == 2
    assert NT.passes_in(recs) == 3  # no baseline named: any mode's
    assert NT.passes_in([{"pass": 0, "mode": "online", "rc": 0}], "plain") == 1  # no baseline ran: any mode's


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-n", "0"], "'--iters' / '-n': 0 is not in the range x>=1"),
        (["-w", "-5"], "'--warmup' / '-w': -5 is not in the range x>=0"),
        (["--timeout", "0"], "'--timeout': 0.0 is not in the range x>0"),
        (["--timeout", "-3"], "'--timeout': -3.0 is not in the range x>0"),
    ],
)
def test_iterations_and_timeout_are_checked(tmp_path: Path, args: list[str], words: str) -> None:
    bin_dir = _fake_bin(tmp_path)
    base = [
        "bench",
        "nccl-tests",
        "--bin",
        str(bin_dir),
        "--gpus",
        "2",
        "-c",
        "all_reduce",
        "-o",
        str(tmp_path / "o"),
    ]
    r = CliRunner().invoke(main, [*base, *args])
    assert r.exit_code == 2 and words in r.output, r.output
    assert not (tmp_path / "o").exists()  # nothing launched


def test_the_plan_checks_iterations_and_timeout_too(tmp_path: Path) -> None:
    plan = NT.Plan(
        bin_dir=_fake_bin(tmp_path), out=tmp_path / "o", colls=["all_reduce"], modes=[NT.parse_mode("plain")],
        launches=["single"], gpus=2, begin=1 << 20, end=1 << 20, factor=2, warmup=0, iters=1, passes=1,
        timeout=1.0,
    )  # fmt: skip
    plan.validate()
    from dataclasses import replace

    for change, words in (
        ({"iters": 0}, "--iters"),
        ({"warmup": -1}, "--warmup"),
        ({"timeout": 0.0}, "--timeout"),
    ):
        with pytest.raises(NT.BenchError, match=words):
            replace(plan, **change).validate()


def test_coordinator_table_sums_a_launchs_lookups_per_rank() -> None:
    """What the coordinator cost each rank of a launch decided over TCP, per communicator: lookups and those
    that asked the authority summed over its tasks, the client's connect and the authority's answer time from
    its `board` record, the slowest first-call lookup (a job's start); a launch without `board` records (one
    process) has none."""
    trace = [
        {
            "ev": "board",
            "rank": 0,
            "first_auth_ms": 0.9,
            "connect_failures": 0,
            "reconnects": 0,
            "lookups_waited": 3,
        },
        {
            "ev": "board",
            "rank": 1,
            "first_auth_ms": 8.3,
            "connect_failures": 3,
            "reconnects": 0,
            "lookups_waited": 5,
            "round_trips": 4,
            "round_trip_us": 112.4,
            "round_trip_max_us": 380.0,
        },
        {
            "ev": "task",
            "rank": 0,
            "board": "tcp",
            "lookups": 10,
            "lookups_asked": 2,
            "lookup_us": 900.0,
            "lookup_max_us": 400.0,
            "slow_lookups": [[0, 400.0], [7, 300.0]],
        },
        {
            "ev": "task",
            "rank": 0,
            "board": "tcp",
            "lookups": 4,
            "lookups_asked": 1,
            "lookup_us": 100.0,
            "lookup_max_us": 60.0,
            "slow_lookups": [[2, 60.0]],
        },
        {
            "ev": "task",
            "rank": 1,
            "board": "tcp",
            "lookups": 14,
            "lookups_asked": 5,
            "lookup_us": 49500.0,
            "lookup_max_us": 49070.0,
            "slow_lookups": [[0, 49070.0]],
        },
        # another communicator's, in this process
        {"ev": "task", "rank": 1, "board": "local", "lookups": 99, "lookup_us": 99.0},
        # another communicator over TCP (rank 0 of it in rank 1's process): its own row
        {"ev": "board", "comm": "c2", "rank": 0, "first_auth_ms": 8.3, "connect_failures": 3},
        {"ev": "task", "comm": "c2", "rank": 0, "board": "tcp", "lookups": 3, "lookups_asked": 3},
    ]
    c = NT.coordinator_stats(trace)
    assert c is not None
    r0, r1, other = c["ranks"]
    assert (other["comm"], other["rank"], other["lookups"], other["lookups_asked"]) == ("c2", 0, 3, 3)
    assert (r0["lookups"], r0["lookups_asked"], r0["lookup_ms"]) == (14, 3, 1.0)
    assert (r0["slowest_lookup_us"], r0["slowest_first_lookup_us"]) == (400.0, 400.0)
    assert (r1["lookups"], r1["connect_failures"], r1["slowest_first_lookup_us"]) == (14, 3, 49070.0)
    rec = {"pass": 1, "launch": "mpi", "coll": "all_reduce", "mode": "online", "coordinator": c}
    text = NT.coordinator_table([rec, {"pass": 0, "launch": "mpi", "coll": "all_reduce", "mode": "plain"}])
    rows = [ln for ln in text.splitlines() if ln.startswith("| 1 ")]
    assert rows == [
        "| 1 | mpi | all_reduce | online | 0 | 14 | 3 | 1.0 | 400 | 400 | 0 / 0 | 0.9 | 0 | 0 |",
        "| 1 | mpi | all_reduce | online | 1 | 14 | 5 | 49.5 | 49070 | 49070 | 112 / 380 | 8.3 | 3 | 0 |",
        "| 1 | mpi | all_reduce | online | 0 | 3 | 3 | 0.0 | 0 | 0 | 0 / 0 | 8.3 | 3 | 0 |",
    ]
    assert NT.coordinator_stats([t for t in trace if t["ev"] == "task"]) is None


def test_a_rerun_with_other_settings_is_refused(tmp_path: Path) -> None:
    """A rerun into a folder resumes it only under the settings its launches were measured with: other sizes,
    GPUs or a mode's arguments under the same name are refused in one sentence naming them (nothing is
    launched, launches.jsonl is left as it was); more passes, modes or collectives resume."""
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "launches.log"
    out = tmp_path / "out"
    env = {"FAKE_LOG": str(log)}
    base = ["--bin", str(bin_dir), "-c", "all_reduce", "-o", str(out), "--no-progress"]
    first = [*base, "-g", "2", "-p", "1", "-e", "2M", "-m", "plain", "-m", "observe"]
    r = _invoke(first, env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    launched, recorded = len(log.read_text().splitlines()), (out / "launches.jsonl").read_text()
    refused = [
        (
            ["-g", "8", "-b", "64M", "-e", "256M", "-m", "plain", "-m", "observe"],
            ["-g 2 then, 8 now", "-b 1048576"],
        ),
        (["-g", "2", "-e", "2M", "-f", "4", "-m", "plain", "-m", "observe"], ["-f 2 then, 4 now"]),
        (["-g", "2", "-e", "2M", "-n", "7", "-m", "plain", "-m", "observe"], ["-n 40 then, 7 now"]),
        (
            ["-g", "2", "-e", "2M", "--nt-args", "-d half", "-m", "plain", "-m", "observe"],
            ["--nt-args '' then"],
        ),
        (
            ["-g", "2", "-e", "2M", "-m", "plain", "-m", "observe:--mode table"],
            ["mode observe's options '--mode observe' then, '--mode table' now"],
        ),
        (
            ["-g", "2", "-e", "2M", "-m", "plain", "-m", "observe:--mode observe AUTOCCL_CLOCK=kernel"],
            ["mode observe's VAR=VALUE '' then, 'AUTOCCL_CLOCK=kernel' now"],
        ),
        # the modes' places in a pass, and whether an autoccl mode's launches left traces
        (
            ["-g", "2", "-e", "2M", "--order", "fixed", "-m", "plain", "-m", "observe"],
            ["--order rotate then, fixed now"],
        ),
        (["-g", "2", "-e", "2M", "--trace", "-m", "plain", "-m", "observe"], ["--trace off then, on now"]),
    ]
    for args, words in refused:
        r = CliRunner().invoke(main, ["bench", "nccl-tests", *base, *args], env=env)
        assert r.exit_code != 0 and "measured with other settings (" in r.output, (args, r.output)
        assert all(w in r.output for w in words), (args, r.output)
        assert len(log.read_text().splitlines()) == launched
        assert (out / "launches.jsonl").read_text() == recorded
    # --timeout only bounds a launch: another resumes (here nothing is left to launch)
    r = _invoke([*first, "--timeout", "77"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert len(log.read_text().splitlines()) == launched
    # launches recorded before --order and --trace were kept resume under either
    older = [json.loads(x) for x in recorded.splitlines()]
    for x in older:
        x["settings"] = {k: v for k, v in x["settings"].items() if k not in ("order", "trace")}
    (out / "launches.jsonl").write_text("".join(json.dumps(x) + "\n" for x in older))
    r = _invoke([*first, "--order", "fixed", "--trace"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert len(log.read_text().splitlines()) == launched
    (out / "launches.jsonl").write_text(recorded)
    # the same settings with another pass, mode and collective: only what is new is launched
    more = [*base[:2], "-c", "all_reduce,all_gather", *base[4:], "-g", "2", "-p", "2", "-e", "2M"]
    r = _invoke([*more, "-m", "plain", "-m", "observe", "-m", "online"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert len(log.read_text().splitlines()) == launched + 2 * 2 * 3 - 2
    # launches of an autoccl that did not record their settings cannot be compared: refused, but summarised
    lines = [json.loads(x) for x in (out / "launches.jsonl").read_text().splitlines()]
    (out / "launches.jsonl").write_text("".join(json.dumps({**x, "settings": None}) + "\n" for x in lines))
    r = CliRunner().invoke(main, ["bench", "nccl-tests", *more, "-m", "plain"], env=env)
    assert r.exit_code != 0 and "did not record their settings" in r.output, r.output
    r = _invoke(["--report-only", "-o", str(out), "--no-progress"], env)
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]


TYPO = "AUTOCCL_" + "CLOK"


@pytest.mark.parametrize(
    ("mode", "words"),
    [
        (
            "x:--mode bogus",
            "mode 'x': Invalid value for '--mode' (env var: 'AUTOCCL_MODE'): 'bogus' is not one of",
        ),
        ("x:AUTOCCL_MODE=bogus", "mode 'x': AUTOCCL_MODE='bogus' is not one of"),
        ("x:--frob", "mode 'x': no such option of autoccl run: --frob"),
        ("x:observe", "mode 'x': no such argument of autoccl run: observe"),
        ("x:--mode fixed", "mode 'x': fixed mode needs rules"),
        # a misspelt setting, its name put together (the settings test lists every AUTOCCL_ name in the code)
        (f"x:--mode observe {TYPO}=kernel", f"{TYPO} is no autoccl setting (did you mean AUTOCCL_CLOCK?)"),
    ],
)
def test_a_bad_mode_is_refused_before_any_launch(tmp_path: Path, mode: str, words: str) -> None:
    """An autoccl mode whose options or AUTOCCL_* assignments `autoccl run` would refuse fails before the
    first launch (plain ones included), in one sentence, not launch by launch in the logs."""
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "launches.log"
    args = [
        "bench",
        "nccl-tests",
        "--bin",
        str(bin_dir),
        "-g",
        "2",
        "-c",
        "all_reduce",
        "-p",
        "1",
        "-e",
        "1M",
    ]
    r = CliRunner().invoke(
        main, [*args, "-m", "plain", "-m", mode, "-o", str(tmp_path / "o")], env={"FAKE_LOG": str(log)}
    )
    assert r.exit_code != 0 and words in r.output and "nothing was launched" in r.output, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert not log.exists()
    # the folders made for the check are gone again, and the output folder this run made (an empty one was
    # left behind); a folder that was there stays
    assert not (tmp_path / "o").exists()
    r = CliRunner().invoke(
        main, [*args, "-m", mode, "-o", str(tmp_path / "a" / "b" / "c")], env={"FAKE_LOG": str(log)}
    )
    assert r.exit_code != 0 and not (tmp_path / "a").exists()  # every folder it made, not only the last
    (tmp_path / "kept").mkdir()
    r = CliRunner().invoke(
        main, [*args, "-m", mode, "-o", str(tmp_path / "kept")], env={"FAKE_LOG": str(log)}
    )
    assert r.exit_code != 0 and (tmp_path / "kept").is_dir() and not any((tmp_path / "kept").iterdir())


def test_placeholders_pass_the_mode_check(tmp_path: Path) -> None:
    """{cache:NAME} and {empty} name caches the run makes: the check before the launches accepts them."""
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "launches.log"
    modes = ["-m", "plain", "-m", "online", "-m", "tw:--mode table --cache-dir {cache:online}", "-m", "idle"]
    args = ["--bin", str(bin_dir), "-g", "2", "-c", "all_reduce", "-p", "1", "-e", "1M", *modes]
    r = _invoke([*args, "-o", str(tmp_path / "o"), "--no-progress"], {"FAKE_LOG": str(log)})
    assert r.exit_code == 0, r.output  # type: ignore[attr-defined]
    assert len(log.read_text().splitlines()) == 4


def test_one_pass_has_no_confidence_interval() -> None:
    """A single pass gives each cell one ratio and the geomean one draw: no 95 % interval, not one of zero
    width ("1.100× (1.100–1.100)") that claims a certainty one launch per mode cannot give."""
    recs = [r for r in _plain_and_online(8 << 20) if r["pass"] == 0]
    s = NT.summarize(recs)
    o = s["overall"]["online/single"]
    assert abs(o["geomean_ge_min_bytes"] - 1.1) < 1e-9
    assert all(math.isnan(x) for x in o["geomean_ci95"])
    assert all(math.isnan(x) for x in s["cells"][0]["modes"]["online"]["ci95"])
    row = next(x for x in NT.markdown(s).splitlines() if x.startswith("| online | single |"))
    assert "1.100× (no interval)" in row, row
    # two passes: an interval again
    two = NT.summarize(_plain_and_online(8 << 20))["overall"]["online/single"]["geomean_ci95"]
    assert all(math.isfinite(x) for x in two)


def test_a_mode_whose_every_launch_failed_keeps_its_row() -> None:
    """A mode none of whose launches ran to the end has no cell, yet its row stays, with its failed launches:
    the table showed no row for it (summary.json's `overall` was empty) and the exit error alone said that
    launches had failed. The baseline's failures are named too, and the cell table has no empty column."""
    recs = _plain_and_online(8 << 20)
    for r in recs:
        if r["mode"] == "online":
            r["rc"], r["rows"] = 3, []
    s = NT.summarize(recs)
    o = s["overall"]["online/single"]
    assert o["failed_launches"] == 2 and o["launches"] == 2 and o["cells"] == 0
    assert o["geomean_ge_min_bytes"] != o["geomean_ge_min_bytes"]  # NaN: no ratio
    md = NT.markdown(s)
    row = next(x for x in md.splitlines() if x.startswith("| online | single |"))
    assert "— (no launch measured beside the baseline)" in row and "| 2 |" in row, row
    head = next(x for x in md.splitlines() if x.startswith("| launch | collective |"))
    assert head.endswith("| spread |"), head
    # the baseline failing: said in the table's notes
    recs = _plain_and_online(8 << 20)
    recs[0]["rc"], recs[0]["rows"] = 1, []
    s = NT.summarize(recs)
    assert s["baseline_failed_launches"] == 1
    assert "plain (the baseline): 1 of 2 launches failed" in NT.markdown(s)


def test_report_only_does_not_count_failures_a_resumed_run_launched_again(tmp_path: Path) -> None:
    """A launch that failed and ran to the end when the run resumed is no failure of the folder: the resumed
    run's summary counts none, and --report-only said '2 launch(es) failed', counted them in the table and
    exited 1 on the same launches.jsonl."""
    bin_dir = _fake_bin(tmp_path)
    out = tmp_path / "out"
    args = ["--bin", str(bin_dir), "-g", "2", "-c", "all_reduce", "-b", "4M", "-e", "4M", "-p", "2"]
    args += ["-m", "plain,online", "-o", str(out), "--no-progress"]
    env = {"FAKE_LOG": str(tmp_path / "log")}
    r = CliRunner().invoke(main, ["bench", "nccl-tests", *args], env={**env, "FAKE_FAIL_TUNED": "1"})
    assert r.exit_code != 0 and "2 launch(es) failed" in r.output, r.output
    r = CliRunner().invoke(main, ["bench", "nccl-tests", *args], env=env)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "summary.json").read_text())["overall"]["online/single"]["failed_launches"] == 0
    assert len((out / "launches.jsonl").read_text().splitlines()) == 6  # the failed attempts stay recorded
    r = CliRunner().invoke(main, ["bench", "nccl-tests", "--report-only", "-o", str(out), "--no-progress"])
    assert r.exit_code == 0, r.output
    o = json.loads((out / "summary.json").read_text())["overall"]["online/single"]
    assert o["failed_launches"] == 0 and o["launches"] == 2 and abs(o["geomean_ge_min_bytes"] - 1.1) < 1e-9


@pytest.mark.parametrize(
    ("nt_args", "named"),
    [
        ("-n 5", "-n (set it with -n/--iters)"),
        ("-d bfloat16 -n5", "-n (set it with -n/--iters)"),
        ("--iters=5", "--iters (set it with -n/--iters)"),
        ("-g 4", "-g (set it with -g/--gpus)"),
        ("-c 0", "-c (set it with none"),
        ("--stepbytes 1024", "--stepbytes (set it with -f/--factor"),
    ],
)
def test_nt_args_may_not_repeat_what_the_harness_sets(tmp_path: Path, nt_args: str, named: str) -> None:
    """nccl-tests takes the last of an option given twice: `--nt-args '-n 5'` ran 5 iterations while the
    record, the resume check and the header said -n 40. Such an option is refused, naming the harness's own;
    nothing is launched."""
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "log"
    out = tmp_path / "out"
    args = ["--bin", str(bin_dir), "-g", "2", "-c", "all_reduce", "-b", "4M", "-e", "4M", "-p", "1"]
    r = CliRunner().invoke(
        main,
        ["bench", "nccl-tests", *args, "--nt-args", nt_args, "-o", str(out), "--no-progress"],
        env={"FAKE_LOG": str(log)},
    )
    assert r.exit_code == 1 and named in r.output and "Traceback" not in r.output, r.output
    assert not log.exists()


def test_nt_args_of_other_options_pass_through() -> None:
    assert NT.own_option_in(["-d", "bfloat16", "-o", "max", "-t", "2", "-r", "-1", "-N", "2"]) is None
    assert NT.own_option_in(["-d", "-n"]) is None  # "-n" is -d's value here


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["-c", "all_reduce,all_gather,all_reduce"], "--colls names all_reduce more than once"),
        (["-c", "all_reduce", "--launch", "single,single"], "--launch names single more than once"),
    ],
)
def test_a_collective_or_launch_kind_named_twice_is_refused(
    tmp_path: Path, extra: list[str], said: str
) -> None:
    """`-c all_reduce,all_reduce` launched every all_reduce launch twice a pass (four launches per pass for
    two modes), the second one's log over the first's, and the summary kept one of the two."""
    bin_dir = _fake_bin(tmp_path)
    log = tmp_path / "log"
    args = ["--bin", str(bin_dir), "-g", "2", "-b", "4M", "-e", "4M", "-p", "1", *extra]
    r = CliRunner().invoke(
        main, ["bench", "nccl-tests", *args, "-o", str(tmp_path / "out")], env={"FAKE_LOG": str(log)}
    )
    assert r.exit_code == 1 and said in r.output, r.output
    assert not log.exists()


# A launch that never ends on its own: the shell starts a child, which would hold the GPUs (and the output
# pipes), and writes the child's pid where the test can see it.
HANGING = """#!/bin/sh
sleep 20 &
echo $! > "$FAKE_PIDFILE"
wait
"""


def _hanging_bin(tmp: Path) -> Path:
    bin_dir = tmp / "hang"
    bin_dir.mkdir()
    exe = bin_dir / "all_reduce_perf"
    exe.write_text(HANGING)
    exe.chmod(exe.stat().st_mode | stat.S_IEXEC)
    return bin_dir


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"


def _ends_within(pid: int, seconds: float = 2.0) -> bool:
    """The process is gone (or a zombie) within `seconds`: a killed process closes its files, which ends the
    harness's wait on the launch's pipes, a moment before the kernel marks it exited (CI on 2 busy cores saw
    the harness return inside that moment). The hanging launch's child would otherwise live 20 s."""
    import time

    end = time.monotonic() + seconds
    while _alive(pid):
        if time.monotonic() > end:
            return False
        time.sleep(0.02)
    return True


def _wait_for(path: Path, seconds: float = 30.0) -> int:
    import time

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if path.is_file() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    raise AssertionError(f"{path} never appeared")


def test_a_launch_past_its_timeout_is_killed_with_its_children(tmp_path: Path) -> None:
    """--timeout killed the launch's first process only: a child it started (mpirun's ranks) kept running,
    and the harness waited for it to close the output pipes, so a 1 s timeout took as long as the child."""
    import time

    pidfile = tmp_path / "pid"
    args = ["--bin", str(_hanging_bin(tmp_path)), "-g", "2", "-c", "all_reduce", "-b", "4M", "-e", "4M"]
    args += ["-p", "1", "-m", "plain", "--timeout", "1", "-o", str(tmp_path / "out"), "--no-progress"]
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["bench", "nccl-tests", *args], env={"FAKE_PIDFILE": str(pidfile)})
    assert r.exit_code == 1 and "1 launch(es) failed" in r.output, r.output
    assert time.monotonic() - t0 < 15
    assert _ends_within(_wait_for(pidfile))


def test_sigterm_stops_the_launch_and_summarises_what_finished(tmp_path: Path) -> None:
    """SIGTERM to the harness killed it at once: the launch under way, in a session of its own, went on
    running (on a GPU machine, beside the next run's launches), and no summary was written. Now the launch's
    processes are killed, the finished launches summarised, and the exit status is 130."""
    import signal
    import subprocess

    fake = _fake_bin(tmp_path)
    hang = _hanging_bin(tmp_path)
    (hang / "all_gather_perf").symlink_to(fake / "all_gather_perf")
    out = tmp_path / "out"
    pidfile = tmp_path / "pid"
    env = {**os.environ, "FAKE_PIDFILE": str(pidfile), "FAKE_LOG": str(tmp_path / "log")}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(NT.__file__).parents[2]), env.get("PYTHONPATH", "")])
    args = ["--bin", str(hang), "-g", "2", "-c", "all_gather,all_reduce", "-b", "4M", "-e", "4M", "-p", "1"]
    args += ["-m", "plain", "-o", str(out), "--no-progress"]
    proc = subprocess.Popen(
        [sys.executable, "-m", "autoccl", "bench", "nccl-tests", *args],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    child = _wait_for(pidfile)
    proc.send_signal(signal.SIGTERM)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "interrupted" in output
    assert _ends_within(child)
    assert "all_gather" in (out / "summary.md").read_text()
