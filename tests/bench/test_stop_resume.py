"""Stopping a benchmark and continuing it (CPU, gloo): SIGTERM to the harness stops the launch under
way, terminates its workers, writes what the finished launches measured and exits 130; `--resume`
continues with the launches left; a harness killed outright takes its workers with it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
MODES = ["nccl", "static:NCCL_PROTO=LL", "static:NCCL_PROTO=Simple"]


def _env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("WORLD_SIZE", "RANK", "SLURM_NTASKS", "SLURM_PROCID")
    }
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "python"), *filter(None, [env.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    return env


def _command(prefix: Path, *extra: str) -> list[str]:
    args = ["bench", "coll", "--device", "cpu", "--backend", "gloo", "--nproc", "2", "--no-progress"]
    args += ["--colls", "ar", "--sizes", "4K", "-w", "1", "-n", "2", "-r", "1", "-o", str(prefix)]
    for mode in MODES:
        args += ["--modes", mode]
    return [sys.executable, "-m", "autoccl", *args, *extra]


def _workers_of(logs: Path) -> list[int]:
    """Pids of live processes whose command line names a spec file under `logs` (this run's workers)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if "autoccl.bench.worker" in cmd and str(logs) in cmd:
            pids.append(int(entry.name))
    return pids


def _wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def _launches_ok(prefix: Path) -> int:
    try:
        doc = json.loads(prefix.with_name(prefix.name + ".json").read_text())
    except (OSError, ValueError):
        return 0
    return sum(1 for e in doc.get("launches", []) if e.get("status") == "ok")


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_sigterm_keeps_results_and_resume_finishes(tmp_path: Path) -> None:
    prefix = tmp_path / "r"
    logs = tmp_path / "r.logs"
    harness = subprocess.Popen(
        _command(prefix), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        _wait(lambda: _launches_ok(prefix) >= 1, 240, "the first launch's checkpoint")
        _wait(lambda: len(_workers_of(logs)) >= 1, 120, "the next launch's workers")
        harness.send_signal(signal.SIGTERM)
        out, _ = harness.communicate(timeout=60)
    finally:
        if harness.poll() is None:
            harness.kill()
    assert harness.returncode == 130, out
    assert "Traceback" not in out, out
    assert "--resume" in out
    _wait(lambda: not _workers_of(logs), 20, "the workers to go")
    doc = json.loads(prefix.with_name("r.json").read_text())
    assert doc["status"] == "interrupted"
    done = [e["label"] for e in doc["launches"] if e.get("status") == "ok"]
    assert 1 <= len(done) < len(MODES)
    assert "interrupted run" in prefix.with_name("r.md").read_text()
    # continue
    resumed = subprocess.run(
        _command(prefix, "--resume"), env=_env(), capture_output=True, text=True, timeout=600
    )
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    doc = json.loads(prefix.with_name("r.json").read_text())
    assert doc["status"] == "complete"
    labels = [e["label"] for e in doc["launches"]]
    assert len(labels) == len(MODES) and len(set(labels)) == len(MODES)
    assert [e["label"] for e in doc["launches"] if e.get("resumed")] == done
    assert {r["launch"] for r in doc["rows"]} == set(labels)  # every launch's cell is there
    assert "gloo, not NCCL" in prefix.with_name("r.md").read_text()
    # resuming with other settings is refused
    other = subprocess.run(
        [*_command(prefix, "--resume"), "-n", "3"], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert other.returncode != 0 and "other settings" in other.stderr and "Traceback" not in other.stderr


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc")
def test_workers_die_with_a_killed_harness(tmp_path: Path) -> None:
    """SIGKILL leaves the harness no chance to clean up: its workers die with it (PR_SET_PDEATHSIG)."""
    prefix = tmp_path / "k"
    logs = tmp_path / "k.logs"
    harness = subprocess.Popen(
        _command(prefix), env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait(lambda: len(_workers_of(logs)) >= 2, 240, "the workers")
        harness.kill()
        harness.wait(timeout=30)
        _wait(lambda: not _workers_of(logs), 30, "the workers to die with the harness")
    finally:
        if harness.poll() is None:
            harness.kill()
        for pid in _workers_of(logs):
            os.kill(pid, signal.SIGKILL)
