"""The Python side of the one table schema: the shared corpus gets the library's verdict
(csrc/engine/tests/test_cache.cc reads the same files), writes take the library's lock."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autoccl import tables

CORPUS = Path(__file__).resolve().parents[1] / "data" / "tables"
FILES = sorted(CORPUS.glob("*.table"))


def test_corpus_is_there() -> None:
    assert sum(f.name.startswith("good-") for f in FILES) >= 5
    assert sum(f.name.startswith("bad-") for f in FILES) >= 25


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_corpus_verdict(path: Path) -> None:
    if path.name.startswith("good-"):
        t = tables.load_table(path)
        assert t.fingerprint == tables.fingerprint_of(t.meta)
        again = tables.parse_table(t.dumps())  # what we write reads back the same
        assert again == t
    else:
        with pytest.raises(tables.TableError):
            tables.load_table(path)


def test_expected_fingerprint() -> None:
    good = CORPUS / "good-basic.table"
    fp = tables.load_table(good).fingerprint
    assert tables.load_table(good, fp).fingerprint == fp
    with pytest.raises(tables.TableError, match="not 0123456789abcdef"):
        tables.load_table(good, "0123456789abcdef")


def test_fingerprint_is_the_library_one() -> None:
    # Fingerprint::id() of the library for this meta line (csrc/engine/tests: fingerprint case's sample)
    meta = {
        "gpu": "NVIDIA H200",
        "gpus": "4",
        "nccl": "22809",
        "ranks": "4",
        "nodes": "1",
        "nvl_domains": "1",
    }
    assert tables.fnv1a64(b"") == 0xCBF29CE484222325
    assert tables.fnv1a64(b"a") == 0xAF63DC4C8601EC8C  # FNV-1a 64 reference value
    assert tables.fingerprint_of(meta) == (CORPUS / "good-basic.table").read_text().splitlines()[1].split()[1]


def test_write_holds_the_library_lock(tmp_path: Path) -> None:
    """While Python writes under `table_lock`, an flock on `<table>.lock` (what the library takes) fails."""
    t = tables.load_table(CORPUS / "good-basic.table")
    dest = tmp_path / "tables" / f"{t.fingerprint}.table"
    dest.parent.mkdir()
    probe = (
        "import fcntl, sys\n"
        "f = open(sys.argv[1], 'a')\n"
        "try:\n    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)\nexcept OSError:\n    sys.exit(3)\n"
    )
    with tables.table_lock(dest):
        held = subprocess.run([sys.executable, "-c", probe, str(dest) + ".lock"], check=False)
    assert held.returncode == 3
    free = subprocess.run([sys.executable, "-c", probe, str(dest) + ".lock"], check=False)
    assert free.returncode == 0
    assert tables.write_table_atomic(t, dest) == len(t.tasks)
    with open(str(dest) + ".lock") as f:  # the lock file stays (waiters share its inode)
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    assert not [p for p in dest.parent.iterdir() if ".tmp" in p.name]
    assert os.path.exists(dest)


def test_merge_keeps_what_another_writer_added(tmp_path: Path) -> None:
    base = tables.load_table(CORPUS / "good-basic.table")
    dest = tmp_path / f"{base.fingerprint}.table"
    tables.write_table_atomic(base, dest)
    mine = tables.Table(base.fingerprint, base.meta, [dict(base.tasks[0], bytes="4096")])
    assert tables.write_table_atomic(mine, dest, merge=True) == 2
    assert {t["bytes"] for t in tables.load_table(dest).tasks} == {"67108864", "4096"}


def test_merge_replaces_pairs_per_task_and_pair(tmp_path: Path) -> None:
    """A pair another job measured is replaced only by a record of the same task and pair; the others stay
    (a job that skipped a pair measured far behind must not erase that record)."""
    base = tables.load_table(CORPUS / "good-pairs.table")
    dest = tmp_path / f"{base.fingerprint}.table"
    tables.write_table_atomic(base, dest)
    newer = dict(base.pairs[0], time_us="500.0", samples="9")
    other = dict(base.pairs[0], proto="ll128", time_us="470.0")
    mine = tables.Table(base.fingerprint, base.meta, [], [newer, other])
    tables.write_table_atomic(mine, dest, merge=True)
    got = {(p["coll"].lower(), p["proto"].lower()): p["time_us"] for p in tables.load_table(dest).pairs}
    want = {("allreduce", "ll"): "500.0", ("allreduce", "ll128"): "470.0", ("allgather", "ll128"): "80.5"}
    assert got == want
