"""One table format read and written on both sides: what the library (C++) writes, the CLI (Python) reads
field for field, and a table the CLI writes the library applies exactly. The corpus tests (test_tables.py,
test_cache.cc `corpus`) hold the two validators to one verdict; this holds the two writers to one meaning."""

from __future__ import annotations

from pathlib import Path

from emu_helpers import assert_clean, config_key
from test_plugin_modes import nccl_chunk, run_plugin, workload

from autoccl import tables

# A configuration per observed task that differs from NCCL's in every field the table carries (chunks in whole
# grains of their protocol, below NCCL's own: the emulator applies them as NCCL would, unrounded).
NEW = {
    "allreduce": {"algo": "tree", "proto": "ll128", "channels": "12", "chunk": "122880"},
    "allgather": {"algo": "ring", "proto": "ll", "channels": "8", "chunk": "16384"},
    "reducescatter": {"algo": "ring", "proto": "simple", "channels": "20", "chunk_halvings": "2"},
}


def test_library_and_cli_agree_on_tables(plugin: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    scenario = workload(pp=False)  # one fingerprint: every communicator has 4 ranks
    # The library writes: observe mode records NCCL's choice and time per task.
    res = run_plugin(plugin, {"AUTOCCL_MODE": "observe", "AUTOCCL_CACHE_DIR": str(cache)}, scenario=scenario)
    assert_clean(res)
    [path] = tables.cached_tables(str(cache))
    written = tables.load_table(path, path.name.removesuffix(tables.TABLE_SUFFIX))
    seen = {
        (r["coll"], int(r["bytes"])): (r["nccl_algo"].lower(), r["nccl_proto"].lower())
        for r in res.trace
        if r.get("ev") == "task" and r["rank"] == 0
    }
    assert {(t["coll"], int(t["bytes"])): (t["algo"], t["proto"]) for t in written.tasks} == seen
    assert all(float(t["time_us"]) > 0 and int(t["samples"]) > 0 for t in written.tasks), written.tasks

    # The CLI writes the same table with another configuration for every task...
    for task in written.tasks:
        task.update(NEW[task["coll"]])
    mine = tmp_path / "mine.table"
    tables.write_table_atomic(written, mine)
    assert tables.load_table(mine).tasks == written.tasks
    # ... and the library applies each one exactly (channels within the communicator's, chunks as set).
    res2 = run_plugin(plugin, {"AUTOCCL_MODE": "table", "AUTOCCL_TABLE": str(mine)}, scenario=scenario)
    assert_clean(res2)
    assert not res2.warn_lines(), res2.warn_lines()
    applied = 0
    for rec in res2.calls:
        want = NEW[rec["coll"]]
        chunk = int(want.get("chunk", "0")) or nccl_chunk(rec["coll"], want["algo"], want["proto"])
        chunk >>= int(want.get("chunk_halvings", "0"))
        channels = min(int(want["channels"]), int(rec["comm_channels"]))
        assert config_key(rec) == (want["algo"], want["proto"], channels, chunk), rec
        applied += 1
    assert applied == len(res2.calls) > 0
