"""`autoccl report --trace`: the plots and the task table from a plugin trace (read for one rank)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from autoccl.bench.trace_plot import NCCL_LABEL, decision_label, tasks_of
from autoccl.cli import main


def _call(
    rank: int, coll: str, nbytes: int, call: int, algo: str | None, channels: int = 0
) -> dict[str, object]:
    return {
        "ev": "call", "comm": "00000000d3a00101", "rank": rank, "coll": coll, "bytes": nbytes, "call": call,
        "algo": algo, "proto": None if algo is None else "SIMPLE", "channels": channels, "chunk": 0,
        "chunk_halvings": 0, "source": "online",
    }  # fmt: skip


def _trace(path: Path) -> None:
    recs: list[dict[str, object]] = []
    for k in range(60):
        # all_reduce 4 MiB explores ring/simple/8ch on calls 10-19, keeps NCCL's choice from call 20 on
        algo = "RING" if 10 <= k < 20 else None
        recs.append(_call(0, "allreduce", 4 << 20, k, algo, 8 if algo else 0))
        recs.append({"ev": "time", "comm": "00000000d3a00101", "rank": 0, "coll": "allreduce",
                     "bytes": 4 << 20, "call": k, "gpu_us": 60.0 + (30 if algo else 0)})  # fmt: skip
        # all_gather 64 MiB pins tree/simple/16ch from call 40
        recs.append(_call(0, "allgather", 64 << 20, k, "TREE" if k >= 40 else None, 16 if k >= 40 else 0))
        recs.append(_call(1, "allgather", 64 << 20, k, None))  # another rank: not read
    path.write_text("\n".join(json.dumps(r) for r in recs) + "\n")


def test_tasks_and_decisions_are_read_for_one_rank(tmp_path: Path) -> None:
    _trace(tmp_path / "trace.host.1.jsonl")
    recs = [json.loads(line) for line in (tmp_path / "trace.host.1.jsonl").read_text().splitlines()]
    tasks = tasks_of(recs, rank=0)
    assert [(t.coll, t.nbytes) for t in tasks] == [("all_gather", 64 << 20), ("all_reduce", 4 << 20)]
    ag, ar = tasks
    assert ag.converged_at() == 40 and ag.decisions[-1][1] == "tree/simple/16ch"
    assert ar.converged_at() == 20 and ar.decisions[-1][1] == NCCL_LABEL
    assert len(ar.times) == 60 and not ag.times
    assert decision_label({"algo": "RING", "proto": "LL128", "channels": 4, "chunk_halvings": 2}) == (
        "ring/ll128/4ch/chunk÷4"
    )


def test_report_trace_writes_plots_and_table(tmp_path: Path) -> None:
    _trace(tmp_path / "trace.host.1.jsonl")
    out = tmp_path / "out"
    r = CliRunner().invoke(
        main, ["report", "--trace", str(tmp_path / "trace"), "-o", str(out), "--format", "png"]
    )
    assert r.exit_code == 0, r.output
    for name in ("trace_time_per_call.png", "trace_decisions.png", "trace_tasks.md"):
        assert (out / name).stat().st_size > 0, name
    table = (out / "trace_tasks.md").read_text()
    assert "| all_gather 64 MiB (comm 0101) | 60 | 0 | 2 | 40 | tree/simple/16ch |" in table
    assert "| all_reduce 4 MiB (comm 0101) | 60 | 60 | 2 | 20 | NCCL's choice |" in table
    r = CliRunner().invoke(
        main, ["report", "--trace", str(tmp_path / "trace"), "--rank", "3", "-o", str(out)]
    )
    assert r.exit_code != 0 and "rank 3" in r.output
    # the ranks the trace does hold are named, for --rank
    assert "it holds ranks 0, 1 (--rank)" in r.output and "is it an AUTOCCL_TRACE file" not in r.output


def test_report_trace_says_which_lines_it_skipped(tmp_path: Path) -> None:
    """A bad line in the middle and a last line cut short are left out, and said once per file on stderr."""
    _trace(tmp_path / "trace.host.1.jsonl")
    lines = (tmp_path / "trace.host.1.jsonl").read_text().splitlines()
    mid = tmp_path / "trace.host.2.jsonl"
    mid.write_text("\n".join([*lines[:100], "NOT JSON {", "[1, 2]", *lines[100:]]) + "\n")
    cut = tmp_path / "trace.host.3.jsonl"
    cut.write_text("\n".join(lines)[: -len(lines[-1]) // 2])
    out = tmp_path / "out"
    r = CliRunner().invoke(
        main, ["report", "--trace", str(tmp_path / "trace"), "-o", str(out), "--format", "png"]
    )
    assert r.exit_code == 0, r.output
    said = [x for x in r.stderr.splitlines() if "unreadable" in x]
    assert said == [
        f"autoccl report: skipped 2 unreadable lines in {mid}",
        f"autoccl report: skipped 1 unreadable line in {cut}",
    ], r.stderr
    assert (out / "trace_tasks.md").stat().st_size > 0
    r = CliRunner().invoke(main, ["report", "--trace", str(tmp_path / "trace.host.1.jsonl"), "-o", str(out)])
    assert r.exit_code == 0 and "unreadable" not in r.output


def test_report_help_names_every_format() -> None:
    r = CliRunner().invoke(main, ["report", "--help"])
    assert r.exit_code == 0 and "png, svg, pdf" in " ".join(r.output.split())


def test_report_trace_skips_and_says_call_records_with_wrong_typed_fields(tmp_path: Path) -> None:
    """A call or time record whose numbers are not numbers (a damaged or foreign line that is still a JSON
    object) is left out and said once per file, like an unreadable line: not a traceback."""
    _trace(tmp_path / "trace.host.1.jsonl")
    lines = (tmp_path / "trace.host.1.jsonl").read_text().splitlines()
    bad = [
        {"ev": "call", "rank": 0, "call": "x"},
        {"ev": "time", "rank": 0, "coll": "allreduce", "bytes": 4 << 20, "call": 3, "gpu_us": "slow"},
        {"ev": "call", "rank": 0, "coll": "allreduce", "bytes": [1], "call": 1},
        {"ev": "call", "rank": 0, "bytes": 1, "call": 1, "algo": "RING", "chunk_halvings": "2"},
    ]
    mixed = tmp_path / "trace.host.2.jsonl"
    mixed.write_text("\n".join([*lines[:10], *map(json.dumps, bad), *lines[10:]]) + "\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(main, ["report", "--trace", str(mixed), "-o", str(out), "--format", "png"])
    assert r.exit_code == 0, r.output
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    assert f"autoccl report: skipped 4 call records with wrong-typed fields in {mixed} (" in r.stderr, (
        r.stderr
    )
    assert (
        "| all_reduce 4 MiB (comm 0101) | 60 | 60 | 2 | 20 | NCCL's choice |"
        in (out / "trace_tasks.md").read_text()
    )


def test_report_trace_shows_the_exposure_estimate_per_task(tmp_path: Path) -> None:
    _trace(tmp_path / "trace.host.1.jsonl")
    exposure = {
        "ev": "exposure", "comm": "00000000d3a00101", "rank": 0, "period": 3, "samples": 70, "outliers": 2,
        "patterns": 68, "iter_us": 1000.0, "residual_us": 5.0, "timed_for_it": 120,
        "positions": [
            {"pos": 0, "coll": "allgather", "bytes": 64 << 20, "verdict": "exposed",
             "slope": 1.0, "se": 0.01},
            {"pos": 1, "coll": "allgather", "bytes": 64 << 20, "verdict": "unknown",
             "slope": 0.4, "se": 0.6},
            {"pos": 2, "coll": "allreduce", "bytes": 4 << 20, "verdict": "unknown",
             "slope": None, "se": None},
        ],
        "tasks": [
            {"coll": "allgather", "bytes": 64 << 20, "pipe": 1, "calls": 2, "sum_us": 400.0, "slope": 0.93,
             "se": 0.05, "alias": -1, "verdict": "exposed", "positions": [0, 1]},
            {"coll": "allreduce", "bytes": "?", "pipe": 1, "calls": 1, "sum_us": 60.0, "slope": None,
             "se": None, "alias": -1, "verdict": "unknown", "positions": [2]},
        ],
    }  # fmt: skip
    older = dict(exposure, comm="00000000d3a00102")
    del older["tasks"]
    other_rank = dict(exposure, rank=1, comm="00000000d3a00103")
    empty = dict(exposure, comm="00000000d3a00104", tasks=[], positions=7)  # a damaged positions field
    exposure["out_of_bounds"] = True
    with (tmp_path / "trace.host.1.jsonl").open("a") as f:
        for rec in (exposure, older, other_rank, empty):
            f.write(json.dumps(rec) + "\n")
    out = tmp_path / "out"
    r = CliRunner().invoke(
        main, ["report", "--trace", str(tmp_path / "trace"), "-o", str(out), "--format", "png"]
    )
    assert r.exit_code == 0, r.output
    table = (out / "trace_tasks.md").read_text()
    assert "Communicator 00000000d3a00101: an iteration of 3 calls, 70 samples (2 left out)" in table
    assert "positions: 1 exposed, 0 hidden, 2 unknown" in table
    assert "| all_gather 64 MiB | 2 | 0.93 ± 0.05 | exposed |" in table
    assert table.count("A task's slope lies outside 0-1") == 1  # this record's (set after the others')
    assert "| all_reduce ? | 1 | – | unknown |" in table
    assert "00000000d3a00102" in table and "a plugin from before it" in table
    assert "00000000d3a00103" not in table  # rank 1's record: the report reads rank 0
    assert "00000000d3a00104" in table and "no samples yet, or more positions" in table
