"""Every verb (synth and sim have their own suite) and every AUTOCCL_* variable with bad input: each case
must end in one clear sentence and a non-zero exit. The suite fails on a traceback, on exit 0 after an
error, on a message that does not name what was wrong, and on output naming a path under the test's
directory that does not exist unless the line says so (no "wrote X" for an X that was never written)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autoccl.cli import main

DATA = Path(__file__).resolve().parents[1] / "data" / "tables"
# Words that say a path named on the same line was not (or cannot be) made.
NEGATIVE = re.compile(
    r"not exist|no such|cannot|not a |is a directory|not found|missing|refus|exists|unreadable|invalid|"
    r"must|nothing|no tables|is not|holds an earlier|rejected|does not|needs",
    re.IGNORECASE,
)


@dataclass
class Case:
    name: str
    args: list[str]
    mention: str  # the message must name this (the option, variable, value or file)
    env: dict[str, str] = field(default_factory=dict)
    setup: Callable[[Path], None] | None = None
    ok: bool = False  # exit 0 is right (a report of something unusable, not an error)
    status: int | None = None  # the exit status docs/architecture.md promises, where it promises one


def _garbage(path: str, data: bytes) -> Callable[[Path], None]:
    def make(tmp: Path) -> None:
        (tmp / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp / path).write_bytes(data)

    return make


def _copy(name: str, dest: str) -> Callable[[Path], None]:
    return _garbage(dest, (DATA / name).read_bytes())


def _cache_with(*names: str, extra_dir: str | None = None) -> Callable[[Path], None]:
    """A cache under tmp/cache with the corpus tables `names` installed under their fingerprints."""

    def make(tmp: Path) -> None:
        d = tmp / "cache" / "tables"
        d.mkdir(parents=True, exist_ok=True)
        for n in names:
            text = (DATA / n).read_text()
            fp = text.splitlines()[1].split()[1]
            (d / f"{fp}.table").write_text(text)
        if extra_dir:
            (d / extra_dir).mkdir()

    return make


def _two_results(tmp: Path) -> None:
    for i, iters in enumerate((20, 50)):
        doc = {
            "schema": "autoccl-bench/1",
            "kind": "coll",
            "settings": {
                "world_size": 2,
                "device": "cpu",
                "backend": "gloo",
                "iters": iters,
                "modes": ["nccl"],
            },
            "host": {},
            "rows": [],
            "launches": [],
        }
        (tmp / f"r{i}.json").write_text(json.dumps(doc))


def _earlier_demo(tmp: Path) -> None:
    (tmp / "demo" / "emu-online").mkdir(parents=True)


T = "{tmp}"  # replaced by the case's directory
CACHE = ["--cache-dir", f"{T}/cache"]
FIXED = "allreduce:ring/simple/8"
CPU = ["bench", "coll", "--device", "cpu", "--dry-run"]
NT = ["bench", "nccl-tests", "--bin", T, "-g", "2", "-o", f"{T}/o"]

CASES = [
    # -- autoccl env: options
    Case("env-mode", ["env", "--mode", "turbo"], "turbo"),
    Case("env-fixed-without-rules", ["env", "--mode", "fixed"], "rules"),
    Case(
        "env-fixed-bad-proto",
        ["env", "--mode", "fixed", "--fixed", "allreduce:ring/bogus"],
        "bogus",
        status=2,
    ),
    Case(
        "run-fixed-unparsed", ["run", "--mode", "fixed", "--fixed", "bogus", "--", "true"], "bogus", status=2
    ),
    Case(
        "env-fixed-bad-channels",
        ["env", "--mode", "fixed", "--fixed", "allreduce:ring/simple/99"],
        "channels",
    ),
    Case("env-fixed-empty-range", ["env", "--mode", "fixed", "--fixed", "allreduce@64M-1M:ring/ll"], "range"),
    Case("env-fixed-chunk", ["env", "--mode", "fixed", "--fixed", "*:ring/simple/chunk=1"], "chunk"),
    Case("env-fixed-in-online", ["env", "--fixed", FIXED], "--fixed"),
    Case("env-ceiling-negative", ["env", "--channel-ceiling", "-1"], "--channel-ceiling"),
    Case("env-ceiling-65", ["env", "--channel-ceiling", "65"], "--channel-ceiling"),
    Case("env-nccl-channels-negative", ["env", "--nccl-channels", "-1"], "-1"),
    Case("env-nccl-channels-word", ["env", "--nccl-channels", "many"], "many"),
    Case(
        "env-nccl-channels-huge", ["env", "--nccl-channels", "99999999999999999999"], "99999999999999999999"
    ),
    Case("env-trace-missing-dir", ["env", "--trace", f"{T}/nope/trace"], "--trace"),
    Case("env-trace-dir-slash", ["env", "--trace", f"{T}/"], "--trace"),
    Case("env-table-missing", ["env", "--mode", "table", "--table", f"{T}/none.table"], "none.table"),
    Case(
        "env-table-garbage",
        ["env", "--mode", "table", "--table", f"{T}/g.table"],
        "g.table",
        setup=_garbage("g.table", b"\x00\xffgarbage"),
    ),
    Case("env-table-is-dir", ["env", "--mode", "table", "--table", T], "--table"),
    Case("env-table-in-online", ["env", "--table", f"{T}/t.table"], "--table"),
    Case("env-cache-is-file", ["env", "--cache-dir", f"{T}/f"], "--cache-dir", setup=_garbage("f", b"x")),
    Case("env-cache-missing-parent", ["env", "--cache-dir", f"{T}/a/b/c"], "--cache-dir"),
    Case("env-probe-gpus-1", ["env", "--probe-gpus", "1"], "--probe-gpus"),
    Case("env-shell", ["env", "--shell", "zsh"], "zsh"),
    # -- every AUTOCCL_* variable the library or the CLI reads, refused before a job starts
    *[
        Case(f"var-{name.lower()}-{i}", ["env"], name, env={name: value}, status=1)
        for i, (name, value) in enumerate(
            [
                ("AUTOCCL_MODE", "turbo"),
                ("AUTOCCL_MAX_CHANNELS", "abc"),
                ("AUTOCCL_MAX_CHANNELS", "0"),
                ("AUTOCCL_NCCL_CHANNELS", "99999999999999999999999"),
                ("AUTOCCL_MEASURE_CALLS", "-5"),
                ("AUTOCCL_RECHECK_MS", "1.5"),
                ("AUTOCCL_INPROC_SCORE", "fastest"),
                ("AUTOCCL_XPROC_SCORE", "all"),
                ("AUTOCCL_SCORE", "best"),
                ("AUTOCCL_CHUNK", "on"),
                ("AUTOCCL_COORD_ADDR", "host:0"),
                ("AUTOCCL_COORD_ADDR", "no-port"),
                ("AUTOCCL_COORD_ADDR", "::1:80"),
                ("AUTOCCL_COORD_ADDR", "host:99999"),
                ("AUTOCCL_RUN_ADDR", "x"),
                ("AUTOCCL_COORD_TIMEOUT_MS", "abc"),
                ("AUTOCCL_COORD_TIMEOUT_MS", "10"),
                ("AUTOCCL_COORD_LINGER_MS", "-1"),
                ("AUTOCCL_COORD_FAULTS", "drop=5"),
                ("AUTOCCL_COORD_FAULTS", "lose=0.1"),
                ("AUTOCCL_COORD_TOKEN", "tok\x01en"),
                ("AUTOCCL_COORD_SECRET", "x" * 5000),
                ("AUTOCCL_HW", "GPU\x02x4"),
                ("AUTOCCL_TRACE", "/nonexistent/dir/trace"),
                ("AUTOCCL_TABLE", "/nonexistent/dir/t.table"),
                ("AUTOCCL_CACHE_DIR", "/nonexistent/dir/cache"),
                ("AUTOCCL_FIXED", "junk"),
                ("AUTOCCL_LIB_DIR", "/nonexistent/lib"),
                ("AUTOCCL_SYNTH_LIB_DIR", "/nonexistent/lib"),
                ("AUTOCCL_EMU_KEEP", "maybe"),
            ]
        )
    ],
    Case(
        "var-mode-fixed-without-rules",
        ["env", "--mode", "observe"],
        "AUTOCCL_FIXED",
        env={"AUTOCCL_MODE": "fixed"},
    ),
    # -- autoccl run
    Case("run-no-command", ["run"], "COMMAND"),
    Case("run-missing-command", ["run", "--", "/nonexistent/program"], "/nonexistent/program"),
    Case("run-fixed-without-rules", ["run", "--mode", "fixed", "--", "true"], "rules"),
    # an unknown option before the command is a typo, not the command's name
    Case("run-option-typo", ["run", "--mdoe", "observe", "--", "true"], "Did you mean --mode"),
    Case(
        "run-bad-variable", ["run", "--", "true"], "AUTOCCL_MAX_CHANNELS", env={"AUTOCCL_MAX_CHANNELS": "x"}
    ),
    # -- autoccl cache
    Case(
        "clear-empty-ref",
        ["cache", "clear", "--yes", "", *CACHE],
        "''",
        setup=_cache_with("good-basic.table"),
    ),
    Case("clear-no-ref", ["cache", "clear", "--yes", *CACHE], "--all", setup=_cache_with("good-basic.table")),
    Case(
        "clear-not-hex",
        ["cache", "clear", "--yes", "zz", *CACHE],
        "zz",
        setup=_cache_with("good-basic.table"),
    ),
    Case(
        "clear-path",
        ["cache", "clear", "--yes", f"{T}/victim", *CACHE],
        "victim",
        setup=_garbage("victim", b"keep me"),
    ),
    Case(
        "clear-ambiguous",
        ["cache", "clear", "--yes", "ab", *CACHE],
        "matches 2",
        setup=lambda t: [_garbage(f"cache/tables/ab{d * 14}.table", b"x")(t) for d in "01"],
    ),
    Case(
        "clear-no-match",
        ["cache", "clear", "--yes", "ffff", *CACHE],
        "ffff",
        setup=_cache_with("good-basic.table"),
    ),
    Case("clear-both", ["cache", "clear", "--yes", "--all", "ab", *CACHE], "--all"),
    Case("show-empty", ["cache", "show", "", *CACHE], "''"),
    Case("show-no-match", ["cache", "show", "abcd", *CACHE], "abcd"),
    Case(
        "show-garbage-file",
        ["cache", "show", f"{T}/g.table", *CACHE],
        "line",
        setup=_garbage("g.table", b"# autoccl table v1\nfingerprint zz\n"),
    ),
    Case(
        "export-no-force",
        ["cache", "export", "3", f"{T}/out.table", *CACHE],
        "--force",
        setup=lambda t: (_cache_with("good-basic.table")(t), _garbage("out.table", b"mine")(t)),
    ),
    Case(
        "export-missing-dir",
        ["cache", "export", "3", f"{T}/no/out.table", *CACHE],
        "does not exist",
        setup=_cache_with("good-basic.table"),
    ),
    Case("export-unknown", ["cache", "export", "0000", f"{T}/out.table", *CACHE], "0000"),
    Case("import-missing", ["cache", "import", f"{T}/none.table", *CACHE], "none.table"),
    Case("import-dir", ["cache", "import", T, *CACHE], "directory"),
    Case(
        "import-force-merge",
        ["cache", "import", f"{T}/t.table", "--force", "--merge", *CACHE],
        "--merge",
        setup=_copy("good-basic.table", "t.table"),
    ),
    Case(
        "import-into-file",
        ["cache", "import", f"{T}/t.table", "--cache-dir", f"{T}/t.table"],
        "t.table",
        setup=_copy("good-basic.table", "t.table"),
    ),
    *[
        Case(
            f"import-{bad}",
            ["cache", "import", f"{T}/in.table", *CACHE],
            "in.table",
            setup=_copy(f"bad-{bad}.table", "in.table"),
        )
        for bad in (
            "empty",
            "binary-garbage",
            "algo-bogus",
            "channels-negative",
            "time-nan",
            "time-inf",
            "halvings-99",
            "another-machines-meta",
            "fingerprint-line-tampered",
            "unknown-task-field",
            "bytes-overflow",
            "chunk-and-halvings",
            "unterminated-quote",
            "header-v2",
        )
    ],
    Case(
        "list-dir-named-table",
        ["cache", "list", *CACHE],
        "unreadable",
        setup=_cache_with("good-basic.table", extra_dir="0000000000000000.table"),
        ok=True,
    ),
    Case(
        "list-cache-is-file",
        ["cache", "list", "--cache-dir", f"{T}/f"],
        "f",
        setup=_garbage("f/tables", b"x"),
    ),
    # -- autoccl demo (refused before the emulator runs)
    Case("demo-ranks-1", ["demo", "--ranks", "1"], "--ranks"),
    Case("demo-ranks-huge", ["demo", "--ranks", "100000"], "--ranks"),
    Case("demo-steps", ["demo", "--steps", "5"], "--steps"),
    Case("demo-sizes-word", ["demo", "--sizes", "big"], "big"),
    Case("demo-sizes-negative", ["demo", "--sizes", "-8M"], "positive"),
    Case("demo-sizes-overflow", ["demo", "--sizes", "1e400M"], "1e400M"),
    Case("demo-sizes-huge", ["demo", "--sizes", "1024G"], "1024G"),
    Case("demo-sizes-nan", ["demo", "--sizes", "nan,8M"], "bad size 'nan': not a finite number of bytes"),
    Case("demo-sizes-inf", ["demo", "--sizes", "8M,inf"], "bad size 'inf': not a finite number of bytes"),
    Case("demo-buckets-nan", ["demo", "--buckets", "NaN"], "Invalid value for '--buckets'"),
    Case("demo-sizes-fraction", ["demo", "--sizes", "1.5"], "'1.5' is not a whole number of bytes"),
    Case("demo-nothing", ["demo", "--sizes", "", "--buckets", ""], "no collective"),
    Case("demo-load", ["demo", "--load", "-1"], "--load"),
    Case("demo-comms-0", ["demo", "--comms", "0"], "--comms"),
    Case("demo-seed", ["demo", "--seed", "-3"], "--seed"),
    Case("demo-out-file", ["demo", "-o", f"{T}/f"], "is a file", setup=_garbage("f", b"x")),
    Case("demo-out-missing-parent", ["demo", "-o", f"{T}/a/b/c"], "does not exist"),
    Case("demo-out-earlier-demo", ["demo", "-o", f"{T}/demo"], "earlier demo", setup=_earlier_demo),
    Case("demo-out-under-file", ["demo", "-o", f"{T}/f/x"], "is a file", setup=_garbage("f", b"x")),
    Case(
        "coll-out-under-file",
        ["bench", "coll", "--device", "cpu", "--nproc", "2", "--colls", "allreduce", "-o", f"{T}/f/x"],
        "is a file",
        setup=_garbage("f", b"x"),
    ),
    Case(
        "adaptive-check-dtype",
        ["adaptive", "check", "--device", "cpu", "-g", "torus:2x2", "--dtypes", "float32,float99"],
        "float99",
    ),
    # -- autoccl bench nccl-tests
    Case("nt-no-bin", ["bench", "nccl-tests", "--bin", f"{T}/nope", "-g", "2", "-o", f"{T}/o"], "nope"),
    Case(
        "nt-unknown-coll",
        ["bench", "nccl-tests", "--bin", T, "-g", "2", "-c", "gossip", "-o", f"{T}/o"],
        "gossip",
    ),
    Case(
        "nt-bad-mode", ["bench", "nccl-tests", "--bin", T, "-g", "2", "-m", "turbo", "-o", f"{T}/o"], "turbo"
    ),
    Case(
        "nt-bad-launch",
        ["bench", "nccl-tests", "--bin", T, "-g", "2", "--launch", "ssh", "-o", f"{T}/o"],
        "ssh",
    ),
    Case("nt-bad-size", ["bench", "nccl-tests", "--bin", T, "-g", "2", "-b", "lots", "-o", f"{T}/o"], "lots"),
    Case(
        "nt-report-nothing",
        ["bench", "nccl-tests", "--bin", T, "-g", "2", "--report-only", "-o", f"{T}/o"],
        "o",
    ),
    # -- autoccl bench
    Case("bench-sizes-word", [*CPU, "--sizes", "abc"], "abc"),
    Case("bench-sizes-negative", [*CPU, "--sizes", "-1M"], "-1M"),
    Case("bench-colls", [*CPU, "--colls", "bogus"], "bogus"),
    Case("bench-modes", [*CPU, "--modes", "turbo"], "turbo"),
    Case("bench-iters", [*CPU, "--iters", "0"], "--iters"),
    Case("bench-reps", [*CPU, "--reps", "-1"], "--reps"),
    Case("bench-warmup", [*CPU, "--warmup", "-1"], "--warmup"),
    Case("bench-nproc", [*CPU, "--nproc", "0"], "--nproc"),
    Case("bench-timeout", [*CPU, "--timeout", "-5"], "--timeout"),
    Case("bench-dtype", [*CPU, "--dtype", "int3"], "int3"),
    Case("bench-load", [*CPU, "--load", "gemm:0x0x0"], "gemm"),
    Case("bench-static-space", [*CPU, "--modes", "static-best", "--static-space", "garbage"], "garbage"),
    Case("bench-backend", ["bench", "coll", "--device", "cpu", "--backend", "nccl"], "--backend"),
    Case("bench-resume-no-prefix", ["bench", "coll", "--device", "cpu", "--resume"], "-o"),
    Case(
        "bench-resume-missing",
        ["bench", "coll", "--device", "cpu", "--resume", "-o", f"{T}/none"],
        "none.json",
    ),
    Case(
        "bench-gemm-reps-garbage",
        ["bench", "coll", "--device", "cpu", "--gemm-reps-from", f"{T}/g.json"],
        "g.json",
        setup=_garbage("g.json", b"{not json"),
    ),
    Case("train-preset", ["bench", "train", "--device", "cpu", "--preset", "huge"], "huge"),
    Case("train-parallel", ["bench", "train", "--device", "cpu", "--parallel", "tp"], "tp"),
    Case("train-iters", ["bench", "train", "--device", "cpu", "--iters", "1"], "--iters"),
    Case("train-batch", ["bench", "train", "--device", "cpu", "--batch", "0"], "--batch"),
    Case("train-seq-short", ["bench", "train", "--device", "cpu", "--seq", "1"], "--seq 1"),
    # a mode of bench coll that bench train does not run is refused with the ones it does
    Case(
        "train-mode-of-coll",
        ["bench", "train", "--device", "cpu", "--modes", "nccl,oracle"],
        "unknown mode 'oracle'; expected nccl, static:VAR=VAL[,VAR=VAL...], online, online-arms, manual",
    ),
    Case("train-seq", ["bench", "train", "--device", "cpu", "--preset", "tiny", "--seq", "1000000"], "--seq"),
    Case("train-step-arms", ["bench", "train", "--device", "cpu", "--step-arms", "hidden=x"], "--step-arms"),
    # the default --seq follows a preset with a shorter context: the check after it is the one that complains
    Case(
        "train-tiny-default-seq",
        ["bench", "train", "--device", "cpu", "--preset", "tiny", "--manual-channels", "x"],
        "--manual-channels",
    ),
    Case("train-lr", ["bench", "train", "--device", "cpu", "--lr", "0"], "--lr"),
    Case("train-data", ["bench", "train", "--device", "cpu", "--data", "text"], "--data"),
    Case("train-resilience", ["bench", "train", "--device", "cpu", "--resilience", "maybe"], "--resilience"),
    Case(
        "train-torch-profile",
        ["bench", "train", "--device", "cpu", "--torch-profile", "-1"],
        "--torch-profile",
    ),
    Case(
        "train-torch-profile-iters",
        ["bench", "train", "--device", "cpu", "-n", "10", "--torch-profile", "9"],
        "--torch-profile 9",
    ),
    Case(
        "train-online-setting-form",
        ["bench", "train", "--device", "cpu", "--online-setting", "EXPOSURE_EVERY=8"],
        "AUTOCCL_VAR=VALUE",
    ),
    Case(
        "train-online-setting-unknown",
        ["bench", "train", "--device", "cpu", "--online-setting", "AUTOCCL_EXPOSURE_EVRY=8"],
        "AUTOCCL_EXPOSURE_EVERY",
    ),
    Case(
        "train-online-setting-value",
        ["bench", "train", "--device", "cpu", "--online-setting", "AUTOCCL_EXPOSURE_EVERY=2"],
        "AUTOCCL_EXPOSURE_EVERY",
    ),
    Case(
        "train-online-setting-harness",
        ["bench", "train", "--device", "cpu", "--online-setting", "AUTOCCL_MODE=table"],
        "AUTOCCL_MODE is set by",
    ),
    Case(
        "train-online-setting-arms",
        ["bench", "train", "--device", "cpu", "--online-setting", "AUTOCCL_STEP_ARMS=hidden=2,4"],
        "--step-arms",
    ),
    Case(
        "train-online-setting-twice",
        [
            "bench",
            "train",
            "--device",
            "cpu",
            "--online-setting",
            "AUTOCCL_EXPOSURE_EVERY=8",
            "--online-setting",
            "AUTOCCL_EXPOSURE_EVERY=16",
        ],
        "given twice",
    ),
    Case(
        "train-resilience-fsdp",
        ["bench", "train", "--device", "cpu", "--preset", "tiny", "--seq", "32", "--resilience", "on"],
        "--parallel ddp",
    ),
    Case(
        "train-straggler",
        ["bench", "train", "--device", "cpu", "--parallel", "ddp", "--straggler", "3:often:2"],
        "--straggler",
    ),
    Case(
        "train-straggler-rank",
        ["bench", "train", "--device", "cpu", "--nproc", "2", "--parallel", "ddp", "--straggler", "5:0.2:3"],
        "--straggler rank 5",
    ),
    Case(
        "train-kill-sync",
        ["bench", "train", "--device", "cpu", "--nproc", "2", "--parallel", "ddp", "--kill", "1:5"],
        "--resilience on",
    ),
    Case(
        "train-kill-step",
        "bench train --device cpu --nproc 2 --parallel ddp --iters 10 --resilience on --kill 1:10".split(),
        "--kill step 10",
    ),
    Case("train-delay", ["bench", "train", "--device", "cpu", "--delay", "nap"], "--delay"),
    # -- autoccl report
    Case(
        "report-garbage",
        ["report", f"{T}/g.json", "-o", f"{T}/out"],
        "g.json",
        setup=_garbage("g.json", b"\xff"),
    ),
    Case(
        "report-empty", ["report", f"{T}/e.json", "-o", f"{T}/out"], "e.json", setup=_garbage("e.json", b"")
    ),
    Case("report-missing", ["report", f"{T}/none.json", "-o", f"{T}/out"], "none.json"),
    Case("report-nothing", ["report", "-o", f"{T}/out"], "--trace"),
    Case(
        "report-trace-as-result",
        ["report", f"{T}/t.jsonl", "-o", f"{T}/out"],
        "report --trace",
        setup=_garbage("t.jsonl", b'{"ev":"call","rank":0}\n{"ev":"call","rank":1}\n'),
    ),
    # a `bench nccl-tests` run's launches: "not JSON (Extra data ...)" said nothing of what to do
    Case(
        "report-launches-as-result",
        ["report", f"{T}/run/launches.jsonl", "-o", f"{T}/out"],
        "bench nccl-tests --report-only -o",
        setup=_garbage(
            "run/launches.jsonl",
            b'{"pass":0,"launch":"single","coll":"all_reduce","mode":"plain","rc":0,"rows":[]}\n'
            b'{"pass":0,"launch":"single","coll":"all_reduce","mode":"online","rc":0,"rows":[]}\n',
        ),
    ),
    Case(
        "report-trace-missing", ["report", "--trace", f"{T}/nowhere/trace", "-o", f"{T}/out"], "nowhere/trace"
    ),
    Case(
        "report-trace-not-a-trace",
        ["report", "--trace", f"{T}/t.jsonl", "-o", f"{T}/out"],
        "trace",
        setup=_garbage("t.jsonl", b'{"ev": "something else"}\nnot json\n'),
    ),
    Case(
        "report-format",
        ["report", f"{T}/r0.json", "-o", f"{T}/out", "--format", "gif"],
        "gif",
        setup=_two_results,
    ),
    Case(
        "report-mixed-settings",
        ["report", f"{T}/r0.json", f"{T}/r1.json", "-o", f"{T}/out"],
        "--mix",
        setup=_two_results,
    ),
    Case(
        "report-out-is-file", ["report", f"{T}/r0.json", "-o", f"{T}/r1.json"], "r1.json", setup=_two_results
    ),
    Case("report-no-args", ["report"], "RESULTS"),
]


def _expand(items: list[str], tmp: Path) -> list[str]:
    return [x.replace(T, str(tmp)) for x in items]


def _paths_named(output: str, tmp: Path) -> list[tuple[str, str]]:
    """(path, line) for every path under `tmp` the output names."""
    found = []
    for line in output.splitlines():
        for m in re.finditer(re.escape(str(tmp)) + r"[^\s'\"`:;,()]*", line):
            found.append((m.group(0).rstrip("."), line))
    return found


def test_there_are_enough_cases() -> None:
    assert len(CASES) >= 60
    assert len({c.name for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input(case: Case, tmp_path: Path, fake_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AUTOCCL_MODE", "AUTOCCL_FIXED", "AUTOCCL_CACHE_DIR", "AUTOCCL_TRACE", "AUTOCCL_TABLE"):
        monkeypatch.delenv(var, raising=False)
    if case.setup:
        case.setup(tmp_path)
    env = {k: v.replace(T, str(tmp_path)) for k, v in case.env.items()}
    # A wide console: rich folds a long temporary path inside a table cell at 80 columns, and the
    # check below reads each named path whole.
    env.setdefault("COLUMNS", "250")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, _expand(case.args, tmp_path), env=env, catch_exceptions=True)
    output = result.output
    exc = result.exception
    assert exc is None or isinstance(exc, SystemExit), f"uncaught {type(exc).__name__}: {exc}\n{output}"
    assert "Traceback" not in output, output
    if case.ok:
        assert result.exit_code == 0, output
    else:
        assert result.exit_code != 0, f"exit 0 after bad input:\n{output}"
    if case.status is not None:  # a bad variable exit 1, an option that cannot work a usage error, exit 2
        assert result.exit_code == case.status, output
    assert case.mention.replace(T, str(tmp_path)) in output, (
        f"the message does not name {case.mention!r}:\n{output}"
    )
    for path, line in _paths_named(output, tmp_path):
        assert Path(path).exists() or NEGATIVE.search(line), f"names {path}, which was not created:\n{line}"
    if not case.ok:
        lines = [ln for ln in output.strip().splitlines() if ln.strip()]
        errors = [ln for ln in lines if ln.startswith(("Error", "Usage", "Try", "autoccl"))]
        assert errors or len(lines) <= 3, f"not one clear sentence:\n{output}"


def test_the_suite_sees_a_traceback(
    tmp_path: Path, fake_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks above would fail on a verb that raised: a broken table module is caught as such."""
    monkeypatch.setattr("autoccl.tables.load_table", lambda *a, **k: 1 / 0)
    src = tmp_path / "t.table"
    src.write_bytes((DATA / "good-basic.table").read_bytes())
    result = CliRunner().invoke(main, ["cache", "import", str(src), "--cache-dir", str(tmp_path / "c")])
    assert isinstance(result.exception, ZeroDivisionError)


def test_unwritable_directories_are_refused_before_work(
    tmp_path: Path, fake_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A directory that exists but cannot be written in (a read-only mount; root passes permission checks, so
    os.access stands in for the mount here) is refused up front: `run --trace` would otherwise lose its traces
    quietly (the library only WARNs), and `synth --report` would fail after the whole synthesis."""
    import os

    locked = tmp_path / "ro"
    locked.mkdir()
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: Path(p) != locked and real_access(p, mode, **k))
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(fake_plugin.parent))
    runner = CliRunner()
    res = runner.invoke(main, ["run", "--trace", str(locked / "tr"), "--", "true"])
    assert res.exit_code != 0 and "not writable" in res.output and "--trace" in res.output, res.output
    res = runner.invoke(main, ["synth", "-g", "mesh:2x2", "--report", str(locked / "r.json")])
    assert res.exit_code != 0 and "not writable" in res.output, res.output
    assert not (locked / "r.json").exists()


def _verb_process(tmp_path: Path, body: str, **popen: Any) -> subprocess.Popen[bytes]:
    """`autoccl verb` with a verb of the test's own (BODY: its lines), in a process of its own."""
    script = tmp_path / "verb.py"
    lines = ["import click", "import errno", "from autoccl.cli import main", "@main.command('verb')"]
    lines += ["def verb() -> None:", *(f"    {x}" for x in body.splitlines()), "main()"]
    script.write_text("\n".join(lines) + "\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen([sys.executable, str(script), "verb"], env=env, stderr=subprocess.PIPE, **popen)


def test_a_reader_that_goes_away_ends_the_command_quietly(tmp_path: Path) -> None:
    """`autoccl <verb> | head -1`: exit 141 and nothing on stderr, as a shell tool ended by SIGPIPE."""
    body = "for i in range(200000):\n    click.echo(f'line {i}')"
    p = _verb_process(tmp_path, body, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"line 0\n"
    p.stdout.close()
    assert p.wait(timeout=60) == 141  # the little it writes to stderr fits the pipe: no deadlock
    assert p.stderr.read().decode() == ""


def test_a_broken_pipe_elsewhere_is_an_error(tmp_path: Path) -> None:
    """Only stdout's reader going away is quiet: a pipe to a child that went away is an error, exit 1."""
    p = _verb_process(tmp_path, "raise BrokenPipeError(errno.EPIPE, 'Broken pipe')", stdout=subprocess.PIPE)
    _, err = p.communicate(timeout=60)
    assert p.returncode == 1 and b"Broken pipe" in err, (p.returncode, err)


def test_a_reader_that_goes_away_lets_a_rich_console_finish_its_work(tmp_path: Path) -> None:
    """Rich ends a command on the spot (exit 1) when stdout's reader goes away: `autoccl demo | head -1` left
    no result files. The CLI's console goes quiet instead, the command finishes, then exits 141."""
    done = tmp_path / "done"
    body = (
        "from autoccl.cli.files import pipe_safe_console\n"
        "console = pipe_safe_console()\n"
        "for i in range(200000):\n    console.print(f'line {i}')\n"
        f"open({str(done)!r}, 'w').write('written')"
    )
    p = _verb_process(tmp_path, body, stdout=subprocess.PIPE)
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == b"line 0\n"
    p.stdout.close()
    assert p.wait(timeout=120) == 141
    assert p.stderr.read().decode() == ""
    assert done.read_text() == "written"
