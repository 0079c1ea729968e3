from __future__ import annotations

from pathlib import Path

import pytest

from autoccl.bench import report as rep
from autoccl.bench import results as R
from autoccl.bench import trace as T


def test_convergence_from_trace(fixtures: Path) -> None:
    files = T.trace_files(str(fixtures / "trace"))
    assert [f.name for f in files] == ["trace.host.123.jsonl"]
    recs = T.read_records(files)  # the cut-off last line is dropped
    conv = T.convergence(recs)
    assert [(c["coll"], c["bytes"]) for c in conv] == [("all_gather", 1048576), ("all_reduce", 4096)]
    ag = conv[0]
    assert ag["calls"] == 6 and ag["converged_at"] == 3 and ag["decisions_tried"] == 3
    # where each decision's run begins, and whether it left everything to NCCL (all three forced a pair)
    assert ag["runs"] == [[0, False], [1, False], [3, False]]
    assert ag["final"] == {
        "algo": "ring",
        "proto": "simple",
        "channels": 32,
        "chunk": 0,
        "source": "online",
        "chunk_halvings": 0,  # the fixture predates the field
    }
    assert ag["gpu_us"][0] == [0, 40.0] and len(ag["gpu_us"]) == 6
    T.annotate(conv, {"all_gather/1048576": 2, "all_reduce/4096": 5})
    assert conv[0]["converged_before_measure"] is False and conv[1]["converged_before_measure"] is True
    assert T.convergence(recs, rank=1)[0]["calls"] == 6


def test_report_from_fixtures(fixtures: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    written = rep.make_report(
        [fixtures / "coll_small.json", fixtures / "train_small.json"], out, ["png", "svg"]
    )
    names = {p.name for p in written}
    for stem in (
        "busbw_all_gather_none",
        "busbw_all_reduce_light",
        "speedup_online",
        "speedup_oracle",
        "convergence_online_none",
        "trace_online_none",
        "iterations_fsdp2",
    ):
        assert f"{stem}.png" in names and f"{stem}.svg" in names, stem
    assert {"coll.md", "train.md"} <= names
    for p in written:
        assert p.stat().st_size > 0
    png = (out / "busbw_all_gather_none.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"


def test_speedup_matrix(fixtures: Path) -> None:
    doc = R.load_doc(fixtures / "coll_small.json")
    sizes, cols, mat = rep.speedup_matrix(doc, "online")
    assert sizes == [1 << 20, 16 << 20]
    assert cols == ["all_gather@none", "all_gather@light", "all_reduce@none", "all_reduce@light"]
    assert mat[0][0] == pytest.approx(1.25) and mat[0][1] == pytest.approx(1 / 0.9)


def test_report_cli_errors(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from autoccl.cli import main

    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    r = CliRunner().invoke(main, ["report", str(bad), "-o", str(tmp_path / "o")])
    assert r.exit_code != 0 and "not an autoccl bench result" in r.output
    r = CliRunner().invoke(main, ["report", str(bad), "-o", str(tmp_path / "o"), "--format", "gif"])
    assert r.exit_code != 0 and "bad --format" in r.output
