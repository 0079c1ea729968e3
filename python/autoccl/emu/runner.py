"""Run the NCCL emulator (`autoccl-emu`) on a scenario and collect what it and the plugin wrote."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoccl._paths import emulator_path, find_artefact, plugin_path
from autoccl.emu.scenario import Scenario
from autoccl.tuner_env import plain_nccl_env

TEST_PLUGIN_NAME = "libautoccl-emu-testplugin.so"
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_MODEL = DATA_DIR / "perfmodel_h200x4.json"

Progress = Callable[[str, float], None]
Record = dict[str, Any]


def test_plugin_path() -> Path:
    """The emulator's own test plugin (built next to the emulator, never installed)."""
    return find_artefact(TEST_PLUGIN_NAME)


def default_model() -> Path | None:
    return DEFAULT_MODEL if DEFAULT_MODEL.is_file() else None


@dataclass
class RunResult:
    returncodes: list[int]
    calls: list[Record]
    replays: list[Record]
    summaries: list[Record]
    stderr: str
    trace: list[Record] = field(default_factory=list)
    workdir: Path | None = None

    @property
    def returncode(self) -> int:
        return max(self.returncodes, key=abs) if self.returncodes else 0

    @property
    def warns(self) -> int:
        return sum(int(s.get("warns", 0)) for s in self.summaries)

    @property
    def violations(self) -> int:
        return sum(int(s.get("violations", 0)) for s in self.summaries)

    @property
    def errors(self) -> int:
        return sum(int(s.get("errors", 0)) for s in self.summaries)

    @property
    def divergences(self) -> list[str]:
        """Ranks of one comm that applied different configurations for the same batch (all processes)."""
        return find_divergences(self.calls)

    def warn_lines(self) -> list[str]:
        return [ln for ln in self.stderr.splitlines() if "NCCL WARN" in ln]


def config_of(rec: Mapping[str, Any]) -> tuple[str, str, int, int]:
    return (str(rec["algo"]), str(rec["proto"]), int(rec["channels"]), int(rec["chunk"]))


def find_divergences(calls: Iterable[Mapping[str, Any]]) -> list[str]:
    seen: dict[tuple[str, int, int, int], tuple[int, tuple[str, str, int, int]]] = {}
    out: list[str] = []
    for rec in calls:
        key = (str(rec["comm"]), int(rec["group"]), int(rec["rep"]), int(rec["batch"]))
        cfg = config_of(rec)
        if key not in seen:
            seen[key] = (int(rec["rank"]), cfg)
        elif seen[key][1] != cfg:
            out.append(f"{key}: rank {seen[key][0]} {seen[key][1]} vs rank {rec['rank']} {cfg}")
    return out


def _read_jsonl(path: Path) -> list[Record]:
    out: list[Record] = []
    if not path.is_file():
        return out
    for line in path.read_text(errors="replace").splitlines():
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict):
            out.append(obj)
    return out


def run(
    scenario: Scenario,
    *,
    plugin: str | os.PathLike[str] | None = "default",
    processes: bool = False,
    env: Mapping[str, str] | None = None,
    model: str | os.PathLike[str] | None = "default",
    tuner_version: str = "auto",
    profiler_version: str = "auto",
    trace: bool = True,
    workdir: str | os.PathLike[str] | None = None,
    timeout: float = 120.0,
    progress: Progress | None = None,
    extra_args: Iterable[str] = (),
) -> RunResult:
    """Play `scenario` on the emulator: all ranks as threads of one process, or one process per rank.

    plugin: "default" = the built libautoccl-nccl.so, None = plain NCCL (no plugin), or a path.
    env: variables added to a clean environment (no AUTOCCL_*/NCCL plugin settings inherited).
    """
    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="autoccl-emu-"))
    work.mkdir(parents=True, exist_ok=True)
    scen_path = work / "scenario.txt"
    scen_path.write_text(scenario.to_text())
    exe = str(emulator_path())
    child_env = plain_nccl_env()
    if env:
        child_env.update(env)
    # Hermetic by default: tables the plugin reads or writes stay in the run's directory.
    child_env.setdefault("AUTOCCL_CACHE_DIR", str(work / "cache"))
    trace_prefix = work / "trace"
    if trace and "AUTOCCL_TRACE" not in child_env:
        child_env["AUTOCCL_TRACE"] = str(trace_prefix)
    base = [exe, "--scenario", str(scen_path), "--tuner-version", tuner_version]
    base += ["--profiler-version", profiler_version]
    if plugin is None:
        base.append("--no-plugin")
    else:
        base += ["--plugin", str(plugin_path() if plugin == "default" else Path(plugin))]
    if model == "default":
        m = default_model()
        if m is not None:
            base += ["--model", str(m)]
    elif model is not None:
        base += ["--model", str(model)]
    base += list(extra_args)
    world = scenario.world
    rank_sets = [[r] for r in world] if processes else [world]
    procs: list[tuple[subprocess.Popen[str], Path]] = []
    if progress:
        progress("start", 0.0)
    for ranks in rank_sets:
        truth = work / f"truth.{'_'.join(str(r) for r in ranks)}.jsonl"
        cmd = [*base, "--ranks", ",".join(str(r) for r in ranks), "--truth", str(truth)]
        proc = subprocess.Popen(
            cmd, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=work
        )
        procs.append((proc, truth))
    deadline = time.monotonic() + timeout
    codes: list[int] = []
    summaries: list[Record] = []
    errs: list[str] = []
    calls: list[Record] = []
    replays: list[Record] = []
    for i, (proc, truth) in enumerate(procs):
        try:
            out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for p, _ in procs:
                if p.poll() is None:
                    p.kill()
            out, err = proc.communicate()
            errs.append(f"autoccl-emu: timed out after {timeout}s (hang?)")
            codes.append(124)
        else:
            codes.append(proc.returncode)
        errs.append(err)
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and obj.get("ev") == "summary":
                summaries.append(obj)
        for rec in _read_jsonl(truth):
            (calls if rec.get("ev") == "call" else replays).append(rec)
        if progress:
            progress("rank-process done", (i + 1) / len(procs))
    records: list[Record] = []
    if trace:
        for f in sorted(work.glob("trace*.jsonl")):
            records.extend(_read_jsonl(f))
    return RunResult(
        returncodes=codes,
        calls=calls,
        replays=replays,
        summaries=summaries,
        stderr="".join(errs),
        trace=records,
        workdir=work,
    )
