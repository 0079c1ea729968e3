"""`autoccl report` and the result tables say what their numbers are: CPU (gloo) tables carry the caveat in
the table itself, files measured with different settings are not merged silently, a partial run says so."""

from __future__ import annotations

from typing import Any

import pytest

from autoccl.bench import results as R


def _doc(iters: int, backend: str = "gloo", modes: tuple[str, ...] = ("nccl", "online")) -> dict[str, Any]:
    rows = [
        {"mode": m, "launch": m, "phase": "measure", "coll": "all_reduce", "bytes": 4096, "load": "none",
         "busbw_gbs": 1.0 + i, "time_us": 10.0}
        for i, m in enumerate(modes)
    ]  # fmt: skip
    return {
        "schema": R.SCHEMA,
        "kind": "coll",
        "settings": {
            "world_size": 2,
            "device": "cpu" if backend == "gloo" else "cuda",
            "backend": backend,
            "iters": iters,
            "modes": list(modes),
        },
        "host": {"gpus": [], "nccl": None, "torch": "2.13.0"},
        "rows": rows,
        "launches": [],
    }


def test_gloo_caveat_is_in_the_table() -> None:
    md = R.coll_markdown(_doc(20))
    table_start = md.index("| size")
    assert "gloo on the CPU" in md[md.index("## all_reduce") : table_start]
    assert "online vs nccl (gloo, not NCCL)" in md
    assert "gloo" not in R.coll_markdown(_doc(20, backend="nccl"))


def test_files_with_other_settings_are_not_merged_silently() -> None:
    a, b = _doc(20, modes=("nccl",)), _doc(50, modes=("online",))
    with pytest.raises(R.ResultError, match=r"iters: 20 in a\.json, 50 in b\.json.*--mix"):
        R.merge_docs([a, b], ["a.json", "b.json"])
    merged = R.merge_docs([a, b], ["a.json", "b.json"], mix=True)
    assert merged["mixed"] == ["iters: 20 in a.json, 50 in b.json"]
    assert "merged from files with different settings" in R.coll_markdown(merged)
    # parts of one matrix (other modes only) merge without --mix
    assert "mixed" not in R.merge_docs([_doc(20, modes=("nccl",)), _doc(20, modes=("online",))])


def test_partial_runs_say_so() -> None:
    doc = _doc(20)
    doc["status"] = "interrupted"
    assert "interrupted run" in R.coll_markdown(doc)


def test_the_header_names_only_the_versions_the_host_had() -> None:
    cpu = R.coll_markdown(_doc(20))
    assert "torch 2.13.0." in cpu
    assert not [v for v in ("NCCL", "CUDA", "driver") if f"{v} None" in cpu]
    gpu_doc = _doc(20, backend="nccl")
    gpu_doc["host"].update({"nccl": "2.28.9", "cuda": "13.0", "driver": "580.159.04"})
    assert "torch 2.13.0, NCCL 2.28.9, CUDA 13.0, driver 580.159.04." in R.coll_markdown(gpu_doc)


def test_files_that_measured_the_same_cell_are_not_merged_silently() -> None:
    """Two files with the same mode's row for one cell: the table showed one and dropped the other without a
    word (also for one file given twice). Refused, naming the files and the cell, with --mix too."""
    a, b = _doc(20), _doc(20, modes=("online",))
    with pytest.raises(R.ResultError, match=r"a\.json and b\.json both measured online all_reduce 4K"):
        R.merge_docs([a, b], ["a.json", "b.json"])
    with pytest.raises(R.ResultError, match=r"a\.json is given twice"):
        R.merge_docs([a, a], ["a.json", "a.json"], mix=True)
    # sweep rows are no measured cell: an oracle split over files still merges
    sweep = _doc(20, modes=("nccl",))
    sweep["rows"] = [dict(r, mode="oracle", phase="sweep", launch="oracle/000") for r in sweep["rows"]]
    merged = R.merge_docs([a, sweep, sweep], ["a.json", "s1.json", "s2.json"])
    assert len(merged["rows"]) == 4
