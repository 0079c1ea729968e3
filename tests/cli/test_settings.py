"""Every AUTOCCL_* variable the code reads is described (autoccl.settings and the table of
docs/architecture.md), and the CLI's checks say what the library says about each value."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autoccl import settings

ROOT = Path(__file__).resolve().parents[2]
# Names that look like variables but are not read from the environment.
NOT_VARIABLES = {
    "AUTOCCL_VERSION",  # a macro of the plugin's banner
    "AUTOCCL_SOURCE_DIR",  # a macro of the C++ tests
    "AUTOCCL_TEST_SETTING",  # a name a coord test makes up for a settings digest
    "AUTOCCL_PROBE_RESULT",  # the tag of nccl_probe's output line
    "AUTOCCL_WERROR",  # CMake options
    "AUTOCCL_SANITIZE",
    "AUTOCCL_BUILD_TESTS",
    "AUTOCCL_BUILD_PYTHON",
    "AUTOCCL_LIB_DEST",
    "AUTOCCL_COORD",  # prefixes in tests (startswith)
    "AUTOCCL_RUN",
    "AUTOCCL_SPECULAT",  # a misspelt setting the doctor's test sets
    "AUTOCCL_EXPOSURE_EVRY",  # a misspelt setting a bad-input test gives `bench train --online-setting`
    "AUTOCCL_VAR",  # the form `--online-setting AUTOCCL_VAR=VALUE` asks for
}


def _names_in_code() -> set[str]:
    found: set[str] = set()
    patterns = [
        "csrc/**/*.cc",
        "csrc/**/*.cpp",
        "csrc/**/*.h",
        "python/**/*.py",
        "scripts/*.sh",
        "tests/**/*.py",
    ]
    for pattern in patterns:
        for path in ROOT.glob(pattern):
            found |= set(re.findall(r"AUTOCCL_[A-Z0-9_]*[A-Z0-9]", path.read_text(errors="replace")))
    return found - NOT_VARIABLES


def test_every_variable_in_the_code_is_described() -> None:
    missing = sorted(_names_in_code() - set(settings.BY_NAME))
    assert not missing, f"add these to autoccl/settings.py and docs/architecture.md: {missing}"


def test_every_variable_is_in_the_docs_table() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    section = doc[doc.index("### Every `AUTOCCL_*` variable") : doc.index("### The coordinator's endpoint")]
    rows = [line for line in section.splitlines() if line.startswith("| `AUTOCCL_")]
    listed = {name for line in rows for name in re.findall(r"`(AUTOCCL_[A-Z0-9_]+)`", line.split("|")[1])}
    assert set(settings.BY_NAME) == listed, sorted(set(settings.BY_NAME) ^ listed)


@pytest.mark.parametrize(
    ("rule", "ok"),
    [
        ("allreduce@1M-64M:ring/ll128/16;*:ring/simple", True),
        ("allgather:tree/simple/4/chunk=128K", True),
        ("ALL_REDUCE:NVLS_TREE/LL", True),
        ("allreduce:ring/simple/chunk=64K", True),
        ("allreduce:ring/simple/80", False),
        ("allreduce:ring/bogus", False),
        ("nothing", False),
        ("allreduce@64M-1M:ring/ll", False),
        ("allreduce@1M:ring/ll", False),
        ("alltoall:ring/ll", False),
        ("*:ring/simple/chunk=1K", False),
        ("*:ring/simple/chunk=64K/8", False),
        ("*:ring/simple/chunk=64K/chunk=64K", False),
        (";;", False),
    ],
)
def test_fixed_rules_grammar(rule: str, ok: bool) -> None:
    assert (settings.fixed_rules_problem(rule) is None) == ok


def test_parse_choice_reads_a_rules_right_hand_side() -> None:
    """The one reading of `algo/proto[/channels][/chunk=size]` that fixed-mode checks, the bench's oracle
    launches and the emulator's calibration share."""
    assert settings.parse_choice("ring/ll/16") == settings.Choice("ring", "ll", 16, None)
    assert settings.parse_choice(" NVLS_TREE / Simple ") == settings.Choice("nvlstree", "simple", None, None)
    assert settings.parse_choice("tree/ll128/4/chunk=128K") == settings.Choice("tree", "ll128", 4, 128 << 10)
    for bad in ("ring", "ring/bogus", "ring/ll/0", "ring/ll/65", "ring/ll/x", "ring/ll/chunk=64K/8"):
        with pytest.raises(settings.SettingError):
            settings.parse_choice(bad)
    assert settings.parse_choice("ring/ll/32", max_channels=32).channels == 32


@pytest.mark.parametrize(
    ("addr", "ok"),
    [("h:1", True), ("[::1]:80", True), ("10.0.0.1:65535", True), ("h:0", False), ("h:65536", False),
     ("::1:80", False), ("h", False), (":80", False), ("a b:80", False), ("h:80x", False)],
)  # fmt: skip
def test_host_port(addr: str, ok: bool) -> None:
    assert (settings.host_port_problem(addr) is None) == ok


def test_blank_means_default_and_problems_name_the_variable(tmp_path: Path) -> None:
    assert settings.problems({"AUTOCCL_MAX_CHANNELS": "  "}) == []
    found = settings.problems({"AUTOCCL_MAX_CHANNELS": "65", "AUTOCCL_SCORE": "best"})
    assert len(found) == 2 and found[0].startswith("AUTOCCL_MAX_CHANNELS='65'")
    with pytest.raises(settings.SettingError, match="and 1 more"):
        settings.check({"AUTOCCL_MAX_CHANNELS": "65", "AUTOCCL_SCORE": "best"})
    assert settings.problems({"AUTOCCL_TRACE": str(tmp_path / "t")}) == []


def test_profiler_chain_must_be_a_profiler_plugin(tmp_path: Path) -> None:
    """The architecture table promised a CLI error for a file that is no profiler plugin; only a missing file
    was refused (AUTOCCL_PROFILER_CHAIN=/etc/passwd passed, and the library then warned at run time)."""

    def problem(path: Path) -> str:
        found = settings.problems({"AUTOCCL_PROFILER_CHAIN": str(path)})
        return found[0] if found else ""

    text, elf, plugin = tmp_path / "notes.txt", tmp_path / "libother.so", tmp_path / "libprof.so"
    text.write_text("not a library\n")
    elf.write_bytes(b"\x7fELF" + b"\0" * 60 + b"ncclTunerPlugin_v5\0")
    plugin.write_bytes(b"\x7fELF" + b"\0" * 60 + b"ncclProfiler_v6\0")
    assert "is not a file" in problem(tmp_path / "missing.so")
    assert "is not a shared library" in problem(text)
    assert "exports no ncclProfiler_v7, _v6 or _v5" in problem(elf)
    assert problem(plugin) == ""
    # autoccl's own library exports a profiler too; chained to itself the job died of a stack overflow.
    itself = tmp_path / "libautoccl-nccl.so"
    itself.write_bytes(b"\x7fELF" + b"\0" * 60 + b"ncclProfiler_v7\0AUTOCCL_PROFILER_CHAIN\0")
    assert "is autoccl's own library" in problem(itself)


def test_metrics_dir_must_be_writable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A metrics directory the job cannot write in is a CLI error: the library could write no file there.
    Root passes permission checks, so os.access stands in for a read-only mount."""
    import os

    locked = tmp_path / "ro"
    locked.mkdir()
    assert settings.problems({"AUTOCCL_METRICS_DIR": str(locked)}) == []
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: Path(p) != locked and real_access(p, mode, **k))
    found = settings.problems({"AUTOCCL_METRICS_DIR": str(locked)})
    assert len(found) == 1 and found[0].startswith("AUTOCCL_METRICS_DIR="), found
    assert "not writable" in found[0], found
