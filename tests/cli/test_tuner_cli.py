"""`autoccl env|run|cache` and the table format, without GPUs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import autoccl
from autoccl import tables
from autoccl._paths import plugin_path
from autoccl.cli import main
from autoccl.tuner_env import this_host_address

# A valid table (fingerprint of its meta line): the shared corpus's basic case.
SAMPLE = (Path(__file__).resolve().parents[1] / "data" / "tables" / "good-basic.table").read_text()
FINGERPRINT = SAMPLE.splitlines()[1].split()[1]


def test_table_round_trip() -> None:
    t = tables.parse_table(SAMPLE)
    assert t.fingerprint == FINGERPRINT
    assert t.meta["gpu"] == "NVIDIA H200"
    assert t.tasks[0]["channels"] == "32"
    again = tables.parse_table(t.dumps())
    assert again == t


@pytest.mark.parametrize(
    "text",
    [
        "",
        "garbage",
        "# autoccl table v1\n",  # no fingerprint
        "# autoccl table v1\nfingerprint XYZ\n",
        "# autoccl table v1\nfingerprint 0123456789abcdef\ntask bytes=1\n",  # task without coll
        "# autoccl table v1\nfingerprint 0123456789abcdef\nbogus x=1\n",
        '# autoccl table v1\nfingerprint 0123456789abcdef\nmeta gpu="unterminated\n',
    ],
)
def test_corrupt_tables_are_rejected(text: str) -> None:
    with pytest.raises(tables.TableError):
        tables.parse_table(text)


def test_env_prints_plugin_variables(fake_plugin: Path) -> None:
    r = CliRunner().invoke(
        main, ["env", "--mode", "fixed", "--fixed", "allreduce:ring/simple/8", "--channel-ceiling", "32"]
    )
    assert r.exit_code == 0, r.output
    lines = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert lines["NCCL_TUNER_PLUGIN"] == lines["NCCL_PROFILER_PLUGIN"] == str(fake_plugin)
    assert lines["AUTOCCL_MODE"] == "fixed"
    assert lines["NCCL_NVLS_ENABLE"] == "0"
    assert lines["NCCL_MIN_CTAS"] == lines["NCCL_MAX_CTAS"] == lines["AUTOCCL_MAX_CHANNELS"] == "32"
    assert "AUTOCCL_NCCL_CHANNELS" not in lines
    assert "--nccl-channels" in r.stderr  # the note on stderr: NCCL's own choice changes with the ceiling


def test_env_nccl_channels(fake_plugin: Path) -> None:
    r = CliRunner().invoke(
        main, ["env", "--mode", "online", "--channel-ceiling", "64", "--nccl-channels", "24"]
    )
    assert r.exit_code == 0, r.output
    lines = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert lines["NCCL_MIN_CTAS"] == "64" and lines["AUTOCCL_NCCL_CHANNELS"] == "24"
    assert "--nccl-channels" not in r.stderr
    r = CliRunner().invoke(main, ["env", "--nccl-channels", "65"])
    assert r.exit_code != 0 and "65" in r.output


@pytest.mark.parametrize("mode", ["online", "observe"])
def test_env_nccl_channels_alone_keeps_online_modes_ceiling(fake_plugin: Path, mode: str) -> None:
    """The plain count without --channel-ceiling: online mode's communicators are still its default 64 (they
    were plain ones, where a cap at the plain count does nothing, without a word); other modes' are not."""
    r = CliRunner().invoke(main, ["env", "--mode", mode, "--nccl-channels", "24"])
    assert r.exit_code == 0, r.output
    lines = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert lines["AUTOCCL_NCCL_CHANNELS"] == "24"
    if mode == "online":
        assert lines["NCCL_MIN_CTAS"] == lines["NCCL_MAX_CTAS"] == lines["AUTOCCL_MAX_CHANNELS"] == "64"
        assert "communicators with 64 channels" in r.stderr
    else:
        assert "NCCL_MIN_CTAS" not in lines


def test_env_says_what_it_replaces(fake_plugin: Path) -> None:
    """The user's profiler plugin (NCCL Inspector), tuner plugin and NVLink multicast setting were replaced
    without a word; a fixed NVLS rule, which cannot apply with multicast off, was taken as given."""
    theirs = {
        "NCCL_PROFILER_PLUGIN": "/opt/insp.so",
        "NCCL_TUNER_PLUGIN": "/opt/o.so",
        "NCCL_NVLS_ENABLE": "1",
    }
    r = CliRunner().invoke(main, ["env", "--mode", "fixed", "--fixed", "*:nvls/simple"], env=theirs)
    assert r.exit_code == 0, r.output
    assert "NCCL_PROFILER_PLUGIN=/opt/insp.so replaced" in r.stderr
    assert "chain it: AUTOCCL_PROFILER_CHAIN=/opt/insp.so" in r.stderr
    assert "NCCL_TUNER_PLUGIN=/opt/o.so replaced" in r.stderr
    assert "NCCL_NVLS_ENABLE=1 set to 0" in r.stderr
    assert "--fixed *:nvls/simple: NVLS is off" in r.stderr
    lines = dict(line.removeprefix("export ").split("=", 1) for line in r.stdout.splitlines())
    assert lines["NCCL_PROFILER_PLUGIN"] == str(fake_plugin) and lines["NCCL_NVLS_ENABLE"] == "0"
    inspector = fake_plugin.parent / "insp.so"  # as the settings' check reads a profiler plugin
    inspector.write_bytes(b"\x7fELF" + b"\0" * 60 + b"ncclProfiler_v7\0")
    chained = {"NCCL_PROFILER_PLUGIN": str(inspector), "AUTOCCL_PROFILER_CHAIN": str(inspector)}
    r = CliRunner().invoke(main, ["env", "--mode", "observe"], env=chained)
    assert r.exit_code == 0, r.output
    assert f"(AUTOCCL_PROFILER_CHAIN={inspector} is chained)" in r.stderr and "NVLS" not in r.stderr


def test_table_cut_mid_line_says_so() -> None:
    cut = SAMPLE[: SAMPLE.rindex("task ") + 3]  # a copy interrupted inside the last task line
    with pytest.raises(tables.TableError, match="ends mid-line: cut short"):
        tables.parse_table(cut)
    with pytest.raises(tables.TableError) as whole:  # a bad line in a whole file gets no such guess
        tables.parse_table(SAMPLE.replace("task ", "tas ", 1))
    assert "cut short" not in str(whole.value)


def test_env_observe_says_when_channel_options_change_nccl(fake_plugin: Path) -> None:
    # observe is "change nothing"; the channel options still apply there, and the user is told so
    r = CliRunner().invoke(main, ["env", "--mode", "observe", "--nccl-channels", "8"])
    assert r.exit_code == 0, r.output
    assert "AUTOCCL_NCCL_CHANNELS=8" in r.stdout
    assert "observe mode with --nccl-channels 8" in r.stderr
    r = CliRunner().invoke(main, ["env", "--mode", "observe"])
    assert r.exit_code == 0, r.output
    assert "observe mode" not in r.stderr


def test_env_rejects_fixed_without_rules(fake_plugin: Path) -> None:
    r = CliRunner().invoke(main, ["env", "--mode", "fixed"])
    assert r.exit_code != 0
    assert "rules" in r.output


def test_env_without_plugin_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    monkeypatch.setattr("autoccl._paths._PKG_DIR", tmp_path)
    r = CliRunner().invoke(main, ["env"])
    assert r.exit_code != 0
    assert "libautoccl-nccl.so not found" in r.output


def test_run_executes_command_with_plugin_env(fake_plugin: Path, tmp_path: Path) -> None:
    out = tmp_path / "seen"
    code = (
        f"import os; open({str(out)!r}, 'w')"
        ".write(os.environ['AUTOCCL_MODE'] + ' ' + os.environ['NCCL_TUNER_PLUGIN'])"
    )

    env = {
        **os.environ,
        "AUTOCCL_LIB_DIR": str(fake_plugin.parent),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "python")
        + os.pathsep
        + os.environ.get("PYTHONPATH", ""),
    }
    p = subprocess.run(
        [sys.executable, "-m", "autoccl", "run", "--mode", "observe", "--", sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert out.read_text() == f"observe {fake_plugin}"


def test_cache_import_list_show_export_clear(tmp_path: Path) -> None:
    src = tmp_path / "in.table"
    src.write_text(SAMPLE)
    cdir = tmp_path / "cache"
    runner = CliRunner()
    r = runner.invoke(main, ["cache", "import", str(src), "--cache-dir", str(cdir)])
    assert r.exit_code == 0, r.output
    assert (cdir / "tables" / f"{FINGERPRINT}.table").is_file()
    r = runner.invoke(main, ["cache", "import", str(src), "--cache-dir", str(cdir)])
    assert r.exit_code != 0 and "--force" in r.output
    r = runner.invoke(main, ["cache", "list", "--cache-dir", str(cdir)])
    assert r.exit_code == 0 and FINGERPRINT in r.output
    r = runner.invoke(
        main, ["cache", "show", FINGERPRINT[:4], "--cache-dir", str(cdir)], env={"COLUMNS": "200"}
    )
    assert r.exit_code == 0 and "67108864" in r.output
    dest = tmp_path / "out.table"
    r = runner.invoke(main, ["cache", "export", FINGERPRINT[:4], str(dest), "--cache-dir", str(cdir)])
    assert r.exit_code == 0 and tables.load_table(dest).fingerprint == FINGERPRINT
    # a file of the user's: no lock file left beside it (the library's lock is for cache tables)
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("out.table")) == ["out.table"]
    # into another cache's tables folder: that cache's readers take the lock, so the export does too
    other = tmp_path / "other" / "tables" / f"{FINGERPRINT}.table"
    other.parent.mkdir(parents=True)
    r = runner.invoke(main, ["cache", "export", FINGERPRINT[:4], str(other), "--cache-dir", str(cdir)])
    assert r.exit_code == 0 and other.is_file() and other.with_name(other.name + ".lock").exists(), r.output
    # export never overwrites without --force
    r = runner.invoke(main, ["cache", "export", FINGERPRINT[:4], str(dest), "--cache-dir", str(cdir)])
    assert r.exit_code != 0 and "--force" in r.output
    r = runner.invoke(
        main, ["cache", "export", FINGERPRINT[:4], str(dest), "--force", "--cache-dir", str(cdir)]
    )
    assert r.exit_code == 0, r.output
    # clear: an empty or missing reference is refused, --all clears
    for args in (
        ["cache", "clear", "--yes", ""],
        ["cache", "clear", "--yes"],
        ["cache", "clear", "--yes", "zz"],
    ):
        r = runner.invoke(main, [*args, "--cache-dir", str(cdir)])
        assert r.exit_code != 0, args
        assert (cdir / "tables" / f"{FINGERPRINT}.table").is_file()
    r = runner.invoke(main, ["cache", "clear", "--yes", "--all", "--cache-dir", str(cdir)])
    assert r.exit_code == 0
    assert not list((cdir / "tables").glob("*.table"))


def test_cache_export_writes_files_only(tmp_path: Path) -> None:
    """A link is written through (its target replaced, the link kept); a pipe (or, as root, /dev/null) is
    never replaced by a file, with --force either; a destination ending in a slash is a folder's name, not
    a file's."""
    src = tmp_path / "in.table"
    src.write_text(SAMPLE)
    cdir = tmp_path / "cache"
    runner = CliRunner()
    assert runner.invoke(main, ["cache", "import", str(src), "--cache-dir", str(cdir)]).exit_code == 0

    def export(dest: str, *more: str) -> Any:
        args = ["cache", "export", FINGERPRINT[:4], dest, *more, "--cache-dir", str(cdir)]
        return runner.invoke(main, args)

    real, link = tmp_path / "real.table", tmp_path / "link.table"
    real.write_text("old")
    link.symlink_to(real)
    r = export(str(link), "--force")
    assert r.exit_code == 0, r.output
    assert link.is_symlink() and tables.load_table(real).fingerprint == FINGERPRINT
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    r = export(str(fifo), "--force")
    assert r.exit_code == 1 and "not a regular file" in r.output, r.output
    assert stat.S_ISFIFO(fifo.stat().st_mode)
    r = export(str(tmp_path / "newdir") + "/")
    assert r.exit_code == 1 and "name the file to write" in r.output, r.output
    assert not (tmp_path / "newdir").exists()


def test_cache_export_to_a_place_that_refuses_files_fails_at_once(tmp_path: Path) -> None:
    """A destination whose folder takes no new file (/proc, even for root, whom `os.access` always answers
    yes): one sentence at once, naming the destination. Before, the lock file it could not create read as
    another process's lock: a minute's wait, then a traceback saying the lock was held."""
    src = tmp_path / "in.table"
    src.write_text(SAMPLE)
    cdir = tmp_path / "cache"
    runner = CliRunner()
    assert runner.invoke(main, ["cache", "import", str(src), "--cache-dir", str(cdir)]).exit_code == 0
    t0 = time.monotonic()
    r = runner.invoke(
        main, ["cache", "export", FINGERPRINT[:4], "/proc/autoccl-x.table", "--cache-dir", str(cdir)]
    )
    assert r.exit_code == 1 and "cannot access /proc/autoccl-x.table:" in r.output, r.output
    assert time.monotonic() - t0 < 10


def test_cache_import_rejects_corrupt_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.table"
    bad.write_bytes(b"\xff\xfe not a table")
    r = CliRunner().invoke(main, ["cache", "import", str(bad), "--cache-dir", str(tmp_path / "c")])
    assert r.exit_code != 0
    assert not (tmp_path / "c" / "tables").exists()


def test_cache_list_flags_unreadable_entries(tmp_path: Path) -> None:
    d = tmp_path / "tables"
    d.mkdir()
    (d / "ffffffffffffffff.table").write_text("junk")
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", str(tmp_path)])
    assert r.exit_code == 0
    assert "unreadable" in r.output


def test_env_default_mode_is_online_without_a_shared_coordinator(
    fake_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`autoccl env` exports no coordinator address: jobs started from one shell must not share one
    (under torchrun and srun the library derives its job's own). `autoccl run` gives each job its own."""
    for v in ("AUTOCCL_COORD_ADDR", "AUTOCCL_COORD_TOKEN", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(v, raising=False)
    r = CliRunner().invoke(main, ["env"])
    assert r.exit_code == 0, r.output
    lines = dict(ln.removeprefix("export ").split("=", 1) for ln in r.stdout.splitlines())
    assert lines["AUTOCCL_MODE"] == "online"
    assert not any(k.startswith(("AUTOCCL_COORD", "AUTOCCL_RUN")) for k in lines)
    assert "no coordinator address exported" in r.stderr
    # other modes say nothing about it
    r = CliRunner().invoke(main, ["env", "--mode", "observe"])
    assert "AUTOCCL_COORD" not in r.output and "coordinator" not in r.stderr


def test_relative_lib_dir_gives_an_absolute_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The emulator runs its ranks in a work directory of its own: a relative AUTOCCL_LIB_DIR must not leak.
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("AUTOCCL_LIB_DIR", "lib")
    found = plugin_path()
    assert found.is_absolute() and found == (tmp_path / "lib" / "libautoccl-nccl.so").resolve()


def _fake_launcher(tmp_path: Path, name: str) -> tuple[dict[str, str], Path]:
    """A `name` on PATH that writes the environment it was given to a file (JSON)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    seen = tmp_path / f"{name}.env.json"
    (bin_dir / name).write_text(
        f"#!{sys.executable}\nimport json, os\njson.dump(dict(os.environ), open({str(seen)!r}, 'w'))\n"
    )
    (bin_dir / name).chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    env["PYTHONPATH"] = (
        str(Path(__file__).resolve().parents[2] / "python") + os.pathsep + env.get("PYTHONPATH", "")
    )
    for v in ("AUTOCCL_COORD_ADDR", "AUTOCCL_COORD_TOKEN", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(v, None)
    return env, seen


def test_each_run_has_its_own_coordinator(fake_plugin: Path, tmp_path: Path) -> None:
    """Two `autoccl run` invocations: two addresses and two tokens (jobs never share a coordinator)."""
    env, seen = _fake_launcher(tmp_path, "job")
    env["AUTOCCL_LIB_DIR"] = str(fake_plugin.parent)
    got = []
    for _ in range(2):
        p = subprocess.run(
            [sys.executable, "-m", "autoccl", "run", "--", "job"], env=env, capture_output=True
        )
        assert p.returncode == 0, p.stderr
        got.append(json.loads(seen.read_text()))
    addrs = [g["AUTOCCL_RUN_ADDR"] for g in got]
    assert all(a.startswith("127.0.0.1:") for a in addrs) and addrs[0] != addrs[1]
    assert got[0]["AUTOCCL_RUN_TOKEN"] != got[1]["AUTOCCL_RUN_TOKEN"]
    assert "OMPI_MCA_mca_base_env_list" not in got[0]


def test_table_mode_runs_get_a_coordinator_too(fake_plugin: Path, tmp_path: Path) -> None:
    """Table mode's step guard decides through a coordinator as online mode does: `autoccl run --mode table`
    gives its job one; observe mode, which agrees on nothing, gets none."""
    env, seen = _fake_launcher(tmp_path, "job")
    env["AUTOCCL_LIB_DIR"] = str(fake_plugin.parent)
    for mode, given in (("table", True), ("observe", False)):
        p = subprocess.run(
            [sys.executable, "-m", "autoccl", "run", "--mode", mode, "--", "job"],
            env=env,
            capture_output=True,
        )
        assert p.returncode == 0, p.stderr
        got = json.loads(seen.read_text())
        assert got["AUTOCCL_MODE"] == mode
        assert ("AUTOCCL_RUN_ADDR" in got and "AUTOCCL_RUN_TOKEN" in got) == given, got


def test_run_under_mpirun_forwards_a_reachable_coordinator(fake_plugin: Path, tmp_path: Path) -> None:
    """mpirun starts ranks on other hosts from this one: the job's coordinator is this host's network
    address (loopback only without a network), and Open MPI is told to pass our variables on."""
    env, seen = _fake_launcher(tmp_path, "mpirun")
    env["AUTOCCL_LIB_DIR"] = str(fake_plugin.parent)
    env["OMPI_MCA_mca_base_env_list"] = "MY_VAR"
    # the user's own settings: remote ranks without them would run another configuration (the coordinator
    # refuses ranks whose settings differ)
    env.update({"AUTOCCL_MAX_CHANNELS": "32", "AUTOCCL_MIN_TASK_US": "10", "AUTOCCL_COORD_SECRET": "s3"})
    p = subprocess.run([sys.executable, "-m", "autoccl", "run", "--", "mpirun", "-np", "2", "x"], env=env)
    assert p.returncode == 0
    got = json.loads(seen.read_text())
    host = got["AUTOCCL_RUN_ADDR"].rsplit(":", 1)[0]
    assert host == (this_host_address() or "127.0.0.1")
    forwarded = got["OMPI_MCA_mca_base_env_list"].split(";")
    assert forwarded[0] == "MY_VAR"
    for var in (
        "AUTOCCL_MODE",
        "AUTOCCL_RUN_ADDR",
        "AUTOCCL_RUN_TOKEN",
        "NCCL_TUNER_PLUGIN",
        "NCCL_NVLS_ENABLE",
        "AUTOCCL_MAX_CHANNELS",
        "AUTOCCL_MIN_TASK_US",
        "AUTOCCL_COORD_SECRET",
    ):
        assert var in forwarded
    assert len(forwarded) == len(set(forwarded))


def test_cache_show_lists_measured_pairs(tmp_path: Path) -> None:
    """`cache show` lists the pair records with their ratio to NCCL's choice; `cache list` counts them."""
    src = Path(__file__).resolve().parents[1] / "data" / "tables" / "good-pairs.table"
    cdir = tmp_path / "cache"
    runner = CliRunner()
    r = runner.invoke(main, ["cache", "import", str(src), "--cache-dir", str(cdir)])
    assert r.exit_code == 0, r.output
    show = ["cache", "show", FINGERPRINT[:4], "--cache-dir", str(cdir)]
    r = runner.invoke(main, show, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert "pairs the online search measured" in r.output and "3.63" in r.output and "1.34" in r.output

    # ring/LL at 3.63x on 3 samples is skipped at the next start; ring/LL128 at 1.34x is probed
    def verdicts(output: str) -> dict[str, str]:
        cells = [[c.strip() for c in line.split("│")[1:-1]] for line in output.splitlines() if "│" in line]
        return {f"{c[3]}/{c[4]}": c[-1] for c in cells if c[-1].startswith(("skipped", "probed"))}

    assert verdicts(r.output) == {"ring/ll": "skipped", "RING/LL128": "probed"}, r.output
    assert "8 ch" in r.output and "at their best point" in " ".join(r.output.split()), r.output
    # with the skip off, ring/LL is probed, first at its best point's 8 channels (AUTOCCL_RECORDED_START on)
    r = runner.invoke(main, show, env={"COLUMNS": "200", "AUTOCCL_SKIP_BEHIND_PCT": "300"})
    assert "than 300 %" in r.output and "skipped" not in r.output.replace("skips", ""), r.output
    assert verdicts(r.output) == {"ring/ll": "probed from best", "RING/LL128": "probed"}, r.output
    off = {"COLUMNS": "200", "AUTOCCL_SKIP_BEHIND_PCT": "300", "AUTOCCL_RECORDED_START": "off"}
    r = runner.invoke(main, show, env=off)
    assert verdicts(r.output) == {"ring/ll": "probed", "RING/LL128": "probed"}, r.output
    assert "at the widest" in " ".join(r.output.split()), r.output
    r = runner.invoke(main, show, env={"COLUMNS": "200", "AUTOCCL_RECORDED_START": "maybe"})
    assert r.exit_code == 0 and "the library would refuse it" in r.output, r.output
    r = runner.invoke(main, show, env={"COLUMNS": "200", "AUTOCCL_SKIP_BEHIND_PCT": "abc"})
    assert r.exit_code == 0 and "the library would refuse it" in r.output, r.output
    r = runner.invoke(main, ["cache", "list", "--cache-dir", str(cdir)], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "pairs" in r.output
    # a path that is not a file is said to be one; a prefix that matches nothing names the directory searched
    r = runner.invoke(main, ["cache", "show", str(tmp_path / "nonexist.table")])
    assert r.exit_code != 0 and "no such file" in r.output, r.output
    r = runner.invoke(main, ["cache", "show", "abc", "--cache-dir", str(cdir)])
    assert r.exit_code != 0 and str(cdir / "tables") in r.output, r.output


def test_run_says_why_a_command_cannot_run(tmp_path: Path, fake_plugin: Path) -> None:
    """A directory or a file without execute permission was "command not found"; and the missing command is
    the first thing said, before the environment is built (whose channel probe prints a notice). The exit
    status is the shell's (and env(1)'s): 126 found but not runnable, 127 not found."""
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")
    runner = CliRunner()
    for cmd, says, status in (
        (str(tmp_path), "is a directory, not a command", 126),
        (str(script), "is not executable", 126),
        (str(tmp_path / "missing"), "command not found", 127),
        ("autoccl-no-such-command", "command not found: autoccl-no-such-command", 127),
    ):
        r = runner.invoke(main, ["run", "--mode", "observe", "--", cmd])
        assert r.exit_code == status and says in r.output, (cmd, r.output)
        assert "channel" not in r.output and "Usage" not in r.output, r.output
    # found and executable, and still not runnable (no #! line): the exec fails, 126 with the reason
    script.chmod(0o755)
    script.write_text("")  # exec(2) refuses an empty file (ENOEXEC) where a shell would run it
    p = subprocess.run(
        [sys.executable, "-m", "autoccl", "run", "--mode", "observe", "--", str(script)],
        capture_output=True,
        text=True,
        # the package under test, wherever it is (a checkout, or installed as CI installs it)
        env={**os.environ, "PYTHONPATH": str(Path(autoccl.__file__).resolve().parents[1])},
    )
    assert p.returncode == 126 and f"cannot run {script}: Exec format error" in p.stderr, p.stderr


def test_cache_list_on_a_file_or_a_missing_folder(tmp_path: Path) -> None:
    """A cache directory given as a file read as an empty cache; a missing one now says it is missing."""
    afile = tmp_path / "notes.txt"
    afile.write_text("x")
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", str(afile)])
    assert r.exit_code == 1 and f"{afile} is not a directory" in r.output, r.output
    r = CliRunner().invoke(main, ["cache", "list", "--cache-dir", str(tmp_path / "nope")])
    assert r.exit_code == 0 and "does not exist" in r.output, r.output


def test_an_exported_autoccl_mode_is_runs_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """`eval "$(autoccl env --mode table)"`, then `autoccl run -- job`: the job ran online, the exported mode
    replaced without a word. AUTOCCL_MODE is now --mode's default; --mode given still wins."""
    monkeypatch.setenv("AUTOCCL_MODE", "observe")
    runner = CliRunner()
    r = runner.invoke(main, ["env"])
    assert r.exit_code == 0 and "export AUTOCCL_MODE=observe" in r.stdout, r.output
    r = runner.invoke(main, ["env", "--mode", "table"])
    assert r.exit_code == 0 and "export AUTOCCL_MODE=table" in r.stdout, r.output
    monkeypatch.setenv("AUTOCCL_MODE", "turbo")
    r = runner.invoke(main, ["env"])
    # a bad variable: one sentence, exit 1 (docs/architecture.md), as every other setting
    assert r.exit_code == 1 and "AUTOCCL_MODE='turbo' is not one of" in r.output and "Usage" not in r.output


@pytest.mark.parametrize(
    ("exported", "mode"), [(" table\t", "table"), ("observe\n", "observe"), ("  ", "online")]
)
def test_an_exported_autoccl_mode_is_read_as_the_library_reads_it(
    fake_plugin: Path, monkeypatch: pytest.MonkeyPatch, exported: str, mode: str
) -> None:
    """The library trims ASCII blanks from AUTOCCL_MODE (blank: unset) and doctor reads it so; env and run
    refused ' table' as "not one of 'off', ..." (exit 2) and a blank value as no mode at all."""
    monkeypatch.setenv("AUTOCCL_MODE", exported)
    r = CliRunner().invoke(main, ["env"])
    assert r.exit_code == 0, r.output
    assert f"export AUTOCCL_MODE={mode}" in r.stdout.splitlines(), r.output


def test_env_and_run_name_an_autoccl_variable_that_is_no_setting(
    fake_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt setting in the shell (the library ignores it without a word) is said on stderr, with the
    setting it is closest to; the variables are printed and the job runs all the same."""
    # spelt in two pieces: test_settings.py takes every whole AUTOCCL_ name in the code for a setting
    typo, stray = "AUTOCCL_" + "SPECULAT", "AUTOCCL_" + "ZZZQQQ"
    monkeypatch.setenv(typo, "off")
    monkeypatch.setenv(stray, "1")
    r = CliRunner().invoke(main, ["env", "--mode", "observe"])
    assert r.exit_code == 0, r.output
    assert "export AUTOCCL_MODE=observe" in r.stdout
    assert r.stderr.splitlines() == [
        f"autoccl: {typo} is no autoccl setting (did you mean AUTOCCL_SPECULATE?); the library ignores it",
        f"autoccl: {stray} is no autoccl setting; the library ignores it",
    ]
    # `run` execs its command: in a process of its own
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "python")}
    p = subprocess.run(
        [sys.executable, "-m", "autoccl", "run", "--mode", "observe", "--", sys.executable, "-c", "pass"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert f"{typo} is no autoccl setting (did you mean AUTOCCL_SPECULATE?)" in p.stderr
    monkeypatch.delenv(typo)
    monkeypatch.delenv(stray)
    r = CliRunner().invoke(main, ["env", "--mode", "observe"])
    assert r.exit_code == 0 and r.stderr == "", r.output


def test_a_trace_prefix_that_is_a_directory_is_said(fake_plugin: Path, tmp_path: Path) -> None:
    """`--trace DIR` (an existing folder, no trailing slash) is a prefix: the traces land beside DIR, not in
    it, which is not what the user of a folder's name expects. The variables stay as given; stderr says so."""
    folder = tmp_path / "traces"
    folder.mkdir()
    r = CliRunner().invoke(main, ["env", "--mode", "observe", "--trace", str(folder)])
    assert r.exit_code == 0, r.output
    assert f"export AUTOCCL_TRACE={folder}" in r.stdout
    assert r.stderr == (
        f"autoccl: the trace prefix {folder} is a directory: the traces go beside it "
        f"({folder}.<host>.<pid>.jsonl), not into it; for files in it give {folder}/trace\n"
    )
    r = CliRunner().invoke(main, ["env", "--mode", "observe", "--trace", str(folder / "t")])
    assert r.exit_code == 0 and r.stderr == "", r.output


def test_cache_dir_option_expands_home_in_every_verb(
    fake_plugin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`--cache-dir=~/c` reaches the program unexpanded (the shell expands no '~' after '='): env and run
    read HOME's c, while cache import wrote into a folder named '~' under the current one, so the job never
    saw the table imported for it."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("HOME", str(home))
    src = tmp_path / "in.table"
    src.write_text(SAMPLE)
    runner = CliRunner()
    r = runner.invoke(main, ["cache", "import", str(src), "--cache-dir=~/c"])
    assert r.exit_code == 0, r.output
    assert (home / "c" / "tables" / f"{FINGERPRINT}.table").is_file()
    assert not (work / "~").exists()
    for verb in (["cache", "list"], ["cache", "show", FINGERPRINT[:6]]):
        r = runner.invoke(main, [*verb, "--cache-dir=~/c"], env={"COLUMNS": "200"})
        assert r.exit_code == 0 and FINGERPRINT in r.output, r.output
    r = runner.invoke(main, ["env", "--mode", "table", "--cache-dir=~/c"])
    assert r.exit_code == 0, r.output
    assert f"export AUTOCCL_CACHE_DIR={home / 'c'}" in r.stdout.splitlines()
    assert "no tables in" not in r.output


@pytest.mark.parametrize(
    ("args", "refused"),
    [
        (["--mode", "online", "--channel-ceiling", "64", "--nccl-channels", "24"], True),
        (["--mode", "online", "--channel-ceiling", "0"], True),
        (["--mode", "fixed", "--fixed", "allreduce:ring/simple/8"], True),
        (["--mode", "observe"], True),
        (["--mode", "online"], False),  # online's default channels ask NCCL over that many GPUs
        (["--mode", "table"], False),  # as do a table's pins above a plain communicator's count
        (["--mode", "observe", "--channel-ceiling", "64", "--nccl-channels", "auto"], False),
    ],
)
def test_probe_gpus_where_nothing_is_probed_is_refused(
    fake_plugin: Path, tmp_path: Path, args: list[str], refused: bool
) -> None:
    """--probe-gpus sizes the communicator that asks NCCL for its plain channel count; where no such question
    is asked (the counts given, another mode) it was dropped without a word."""
    probe = ["--probe-gpus", "4", "--cache-dir", str(tmp_path / "c")]
    if not refused:  # without a driver here nothing is probed, and auto's probe is refused for its own reason
        r = CliRunner().invoke(main, ["env", *args, *probe])
        assert "--probe-gpus" not in r.output, r.output
        return
    for verb in (["env"], ["run"]):
        r = CliRunner().invoke(main, [*verb, *args, *probe, *(["--", "true"] if verb == ["run"] else [])])
        assert r.exit_code == 2, r.output
        assert r.output.strip().splitlines()[-1].startswith("Error: --probe-gpus applies to"), r.output


@pytest.mark.parametrize("mode", ["online", "observe"])
def test_env_says_when_the_cache_cannot_keep_what_the_job_learns(
    fake_plugin: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """Online and observe mode write the job's table into the cache at its end; in a folder that cannot be
    written (a read-only mount, another user's) the library's one WARN goes to NCCL's log, unseen without
    NCCL_DEBUG, and the tuning is lost: doctor warned, env and run said nothing."""
    cache = tmp_path / "cache"
    cache.mkdir()
    real_access = os.access
    # as a read-only mount answers (root may write in a folder whatever its mode bits)
    monkeypatch.setattr(os, "access", lambda p, m, **kw: Path(p) != cache and real_access(p, m, **kw))
    r = CliRunner().invoke(main, ["env", "--mode", mode, "--cache-dir", str(cache)])
    assert r.exit_code == 0, r.output
    assert f"directory {cache} is not writable: the job cannot save the table mode {mode} writes" in r.stderr
    r = CliRunner().invoke(main, ["env", "--mode", "table", "--cache-dir", str(cache)])  # reads it only
    assert r.exit_code == 0 and "not writable" not in r.stderr, r.output
    monkeypatch.setattr(os, "access", real_access)
    r = CliRunner().invoke(main, ["env", "--mode", mode, "--cache-dir", str(cache)])
    assert r.exit_code == 0 and "not writable" not in r.stderr, r.output


def test_cache_commands_say_when_they_wait_for_a_lock(tmp_path: Path) -> None:
    """A table whose lock another process holds (a job writing it, another cache command): clear and import
    say that they wait, then go on once it is free; they waited a minute in silence. An entry that is a
    folder is named as such, not sent between --merge and --force."""
    src = tmp_path / "in.table"
    src.write_text(SAMPLE)
    cdir = tmp_path / "cache"
    r = CliRunner().invoke(main, ["cache", "import", str(src), "--cache-dir", str(cdir)])
    assert r.exit_code == 0, r.output
    table = cdir / "tables" / f"{FINGERPRINT}.table"
    holder = (
        "import sys, time\nfrom filelock import FileLock\n"
        "with FileLock(sys.argv[1] + '.lock'):\n    print('held', flush=True)\n    time.sleep(2)\n"
    )
    for args in (["clear", "--yes", "--all"], ["import", str(src), "--force"]):
        p = subprocess.Popen([sys.executable, "-c", holder, str(table)], stdout=subprocess.PIPE, text=True)
        assert p.stdout is not None and p.stdout.readline().strip() == "held"
        started = time.monotonic()
        r = CliRunner().invoke(main, ["cache", *args, "--cache-dir", str(cdir)])
        p.wait(timeout=30)
        assert r.exit_code == 0, r.output
        assert f"waiting for {table}.lock: another process holds it" in r.stderr, (args, r.stderr)
        assert time.monotonic() - started >= 1.0  # it did wait for the holder
    assert table.is_file()  # imported again after the clear
    table.unlink()
    table.mkdir()
    for flag in ("--merge", "--force"):
        r = CliRunner().invoke(main, ["cache", "import", str(src), flag, "--cache-dir", str(cdir)])
        assert r.exit_code == 1, r.output
        assert f"{table} exists and is not a table file: remove it (autoccl cache clear" in r.output, r.output


def test_cache_show_of_a_table_without_tasks_says_so(tmp_path: Path) -> None:
    """A table with no task lines (a job that pinned nothing) printed its meta line and a blank one."""
    empty = tmp_path / "empty.table"
    empty.write_text("".join(line + "\n" for line in SAMPLE.splitlines() if not line.startswith("task ")))
    assert tables.load_table(empty).tasks == []
    r = CliRunner().invoke(main, ["cache", "show", str(empty)])
    assert r.exit_code == 0, r.output
    assert "no tasks: every collective runs NCCL's own choice under this table" in r.output, r.output
