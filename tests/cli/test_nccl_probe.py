"""`--nccl-channels auto`: the plain-communicator probe, against NCCL's log format and a stand-in NCCL."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoccl import nccl_probe, tables
from autoccl.cli import channels, main

# NCCL 2.28.9's INIT lines of one 2-rank communicator on 2 x H200 (nccl-tests, plain NCCL).
_COUNTS = "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"
H200_LOG = f"""\
vm:2309:2309 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:2309:2309 [0] NCCL INFO comm 0x556e523eae40 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
vm:2309:2309 [0] NCCL INFO {_COUNTS}
vm:2310:2310 [1] NCCL INFO {_COUNTS}
"""

# A stand-in for libnccl.so.2 with the four entry points the probe calls. Like NCCL it logs only with
# NCCL_DEBUG=INFO; unlike NCCL it refuses to run if any launcher setting leaked into the probe, so the
# test fails if the probe's communicator is not a plain one.
FAKE_NCCL = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
int ncclGetVersion(int* v) { *v = 22809; return 0; }
const char* ncclGetErrorString(int r) { return r == 5 ? "invalid usage (fake)" : "internal error (fake)"; }
int ncclCommInitAll(void** comms, int ndev, const int* devlist) {
  (void)devlist;
  const char* leaked[] = {"NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN",
                          "AUTOCCL_MODE", "AUTOCCL_MAX_CHANNELS"};
  for (unsigned i = 0; i < sizeof leaked / sizeof *leaked; ++i)
    if (getenv(leaked[i])) { fprintf(stderr, "fake nccl: %s leaked into the probe\n", leaked[i]); return 5; }
  if (getenv("FAKE_NCCL_FAIL")) return 3;
  const char* debug = getenv("NCCL_DEBUG");
  int channels = getenv("FAKE_NCCL_CHANNELS") ? atoi(getenv("FAKE_NCCL_CHANNELS")) : 24;
  for (int r = 0; r < ndev; ++r) {
    comms[r] = (void*)(long)(r + 1);
    if (debug && strcmp(debug, "INFO") == 0)
      printf("box:1:1 [%d] NCCL INFO %d coll channels, %d collnet channels, 0 nvls channels\n",
             r, channels + (getenv("FAKE_NCCL_SKEW") ? r : 0), channels);
  }
  fflush(stdout);
  return 0;
}
int ncclCommDestroy(void* comm) { (void)comm; return 0; }
"""


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build the stand-in NCCL")
    work = tmp_path_factory.mktemp("fake_nccl")
    (work / "fake.c").write_text(FAKE_NCCL)
    lib = work / "libnccl.so.2"
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(lib), str(work / "fake.c")], check=True)
    return lib


def _exports(stdout: str) -> dict[str, str]:
    return dict(line.removeprefix("export ").split("=", 1) for line in stdout.splitlines())


def test_parse_reads_nccl_count() -> None:
    assert nccl_probe.parse_coll_channels(H200_LOG) == 24


@pytest.mark.parametrize(
    ("log", "why"),
    [
        ("vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n", "no '<N> coll channels' line"),
        (H200_LOG.replace("[1] NCCL INFO 24 coll", "[1] NCCL INFO 16 coll"), "different channel counts"),
    ],
)
def test_parse_rejects_missing_or_disagreeing_counts(log: str, why: str) -> None:
    with pytest.raises(nccl_probe.ProbeError, match=why):
        nccl_probe.parse_coll_channels(log)


def test_auto_sets_the_probed_count_from_a_plain_communicator(
    fake_plugin: Path, fake_nccl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setenv("FAKE_NCCL_CHANNELS", "20")
    # A shell that already ran `eval "$(autoccl env --channel-ceiling 64)"`: none of it may reach the probe.
    for key, value in {
        "NCCL_MIN_CTAS": "64",
        "NCCL_MAX_CTAS": "64",
        "AUTOCCL_MODE": "online",
        "AUTOCCL_MAX_CHANNELS": "64",
        "NCCL_TUNER_PLUGIN": str(fake_plugin),
    }.items():
        monkeypatch.setenv(key, value)
    args = ["env", "--channel-ceiling", "64", "--nccl-channels", "auto", "--probe-gpus", "4"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    lines = _exports(r.stdout)
    assert lines["AUTOCCL_NCCL_CHANNELS"] == "20"
    assert lines["NCCL_MIN_CTAS"] == "64"
    assert "over 4 GPUs of this host has 20 channels (NCCL 2.28.9" in r.stderr


@pytest.mark.parametrize(
    ("env", "why"),
    [
        ({"FAKE_NCCL_FAIL": "1"}, "ncclCommInitAll over 4 GPUs failed: internal error"),
        ({"FAKE_NCCL_SKEW": "1"}, "different channel counts"),
        ({"AUTOCCL_NCCL_LIBRARY": "/nonexistent/libnccl.so.2"}, "is not a file"),
        ({"AUTOCCL_NCCL_LIBRARY": __file__}, "cannot load NCCL from"),  # a file, but no library
    ],
)
def test_auto_fails_clearly(
    fake_plugin: Path, fake_nccl: Path, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], why: str
) -> None:
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    r = CliRunner().invoke(
        main, ["env", "--channel-ceiling", "64", "--nccl-channels", "auto", "--probe-gpus", "4"]
    )
    assert r.exit_code != 0
    assert why in r.output
    assert "--nccl-channels N" in r.output  # what to do instead
    assert "export" not in r.stdout  # nothing half-set for the shell to eval


def test_nccl_channels_rejects_other_words(fake_plugin: Path) -> None:
    r = CliRunner().invoke(main, ["env", "--nccl-channels", "many"])
    assert r.exit_code != 0 and "neither a channel count nor 'auto'" in r.output


def _cache_with(tmp_path: Path, channels: list[int]) -> Path:
    """A cache holding one table whose tasks pin `channels` (0: NCCL's own)."""
    meta = {
        "gpu": "NVIDIA H200",
        "gpus": "2",
        "nccl": "22809",
        "ranks": "2",
        "nodes": "1",
        "nvl_domains": "1",
    }
    tasks = [
        {
            "coll": "allgather",
            "bytes": str(1 << (20 + i)),
            "pipe": "1",
            "algo": "ring",
            "proto": "simple",
            "channels": str(c),
            "chunk": "0",
            "time_us": "10.0",
            "nccl_us": "11.0",
            "samples": "6",
        }
        for i, c in enumerate(channels)
    ]
    table = tables.Table(tables.fingerprint_of(meta), meta, tasks)
    cache = tmp_path / "cache"
    (cache / "tables").mkdir(parents=True)
    tables.write_table_atomic(table, cache / "tables" / f"{table.fingerprint}.table")
    return cache


@pytest.mark.parametrize(
    ("pinned", "extra", "ceiling"),
    [
        ([0, 64, 32], [], "64"),  # a pin above a plain communicator's 24: the communicators online tuned on
        ([0, 16, 24], [], None),  # every pin fits a plain communicator
        ([], [], None),  # nothing pinned: table mode stays on NCCL's communicators
        ([64], ["--channel-ceiling", "0"], None),  # said explicitly
    ],
)
def test_table_mode_gets_the_communicators_its_pins_need(
    fake_plugin: Path,
    fake_nccl: Path,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    pinned: list[int],
    extra: list[str],
    ceiling: str | None,
) -> None:
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setattr(channels, "has_nvidia_driver", lambda: True)
    cache = _cache_with(tmp_path, pinned)
    probe = [] if extra else ["--probe-gpus", "2"]  # a channel option given: nothing is probed
    r = CliRunner().invoke(main, ["env", "--mode", "table", "--cache-dir", str(cache), *probe, *extra])
    assert r.exit_code == 0, r.output
    lines = _exports(r.stdout)
    assert lines.get("NCCL_MIN_CTAS") == ceiling and lines.get("NCCL_MAX_CTAS") == ceiling, lines
    if ceiling:
        assert lines["AUTOCCL_NCCL_CHANNELS"] == "24"
        assert "the table pins up to 64 channels" in r.stderr


def test_table_mode_reads_the_pins_of_the_table_given(
    fake_plugin: Path, fake_nccl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setattr(channels, "has_nvidia_driver", lambda: True)
    table = next((_cache_with(tmp_path, [0, 64]) / "tables").glob("*.table"))
    args = ["env", "--mode", "table", "--table", str(table), "--cache-dir", str(tmp_path / "none")]
    r = CliRunner().invoke(main, [*args, "--probe-gpus", "2"])
    assert r.exit_code == 0, r.output
    assert _exports(r.stdout).get("NCCL_MIN_CTAS") == "64", r.stdout


def test_table_mode_reads_an_exported_table_as_the_job_does(
    fake_plugin: Path, fake_nccl: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The library reads AUTOCCL_TABLE in table mode; env/run said 'no tables in <cache>: table mode applies
    nothing', left its 64-channel pin on NCCL's plain communicators, and took a table that is none."""
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setattr(channels, "has_nvidia_driver", lambda: True)
    table = next((_cache_with(tmp_path, [0, 64]) / "tables").glob("*.table"))
    monkeypatch.setenv("AUTOCCL_TABLE", str(table))
    args = ["env", "--mode", "table", "--cache-dir", str(tmp_path / "none"), "--probe-gpus", "2"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "no tables in" not in r.stderr, r.stderr
    assert _exports(r.stdout).get("NCCL_MIN_CTAS") == "64", r.stdout
    bad = tmp_path / "bad.table"
    bad.write_text("not a table\n")
    monkeypatch.setenv("AUTOCCL_TABLE", str(bad))
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 1, r.output
    assert (
        r.output.strip().splitlines()[-1].startswith(f"Error: AUTOCCL_TABLE={bad}: line 1: not an autoccl")
    ), r.output
    # another mode does not read it as a table
    r = CliRunner().invoke(main, ["env", "--mode", "off", "--cache-dir", str(tmp_path / "none")])
    assert r.exit_code == 0, r.output


def test_table_mode_says_when_the_cache_has_no_table(fake_plugin: Path, tmp_path: Path) -> None:
    """Table mode on an empty cache ran the job on NCCL's choices without a word; with a table (or --table) it
    says nothing."""
    r = CliRunner().invoke(main, ["env", "--mode", "table", "--cache-dir", str(tmp_path / "empty")])
    assert r.exit_code == 0, r.output
    assert "no tables in" in r.stderr and "--mode online" in r.stderr, r.stderr
    cache = _cache_with(tmp_path, [0])
    r = CliRunner().invoke(main, ["env", "--mode", "table", "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert "no tables in" not in r.stderr, r.stderr
