"""Run the NCCL emulator (`autoccl-emu`) on a scenario and collect what it and the plugin wrote."""

from __future__ import annotations

import itertools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from autoccl._paths import emulator_path, find_artefact, plugin_path
from autoccl.emu.scenario import Scenario
from autoccl.tuner_env import SAFETY_ENV, free_port, plain_nccl_env

TEST_PLUGIN_NAME = "libautoccl-emu-testplugin.so"
# Profiler plugins that count the events they are given (tests of AUTOCCL_PROFILER_CHAIN), by version.
COUNTING_PROFILER_NAMES = {
    6: "libautoccl-emu-countingprofiler.so",
    5: "libautoccl-emu-countingprofiler-v5.so",
    7: "libautoccl-emu-countingprofiler-v7.so",
}
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
DEFAULT_MODEL = DATA_DIR / "perfmodel_h200x4.json"

Progress = Callable[[str, float], None]
Record = dict[str, Any]


def _dies_with_parent() -> Callable[[], None] | None:
    """For Popen's preexec_fn (Linux): the child gets SIGKILL when the thread that started it ends, however
    this process ends (SIGTERM, SIGKILL, a closed terminal); else an emulator runs on, a child of nobody, for
    the rest of its scenario. The prctl is looked up here, before the fork, so the child only calls it."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    pr_set_pdeathsig = 1

    def arm() -> None:
        prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)

    return arm


def _kill(procs: Iterable[subprocess.Popen[str]]) -> None:
    live = list(procs)
    for p in live:
        p.kill()
    for p in live:
        p.wait()


def test_plugin_path() -> Path:
    """The emulator's own test plugin (built next to the emulator, never installed)."""
    return find_artefact(TEST_PLUGIN_NAME)


def counting_profiler_path(version: int) -> Path:
    """The counting profiler plugin exporting ncclProfiler_v<version> alone (built next to the emulator)."""
    return find_artefact(COUNTING_PROFILER_NAMES[version])


def default_model() -> Path | None:
    return DEFAULT_MODEL if DEFAULT_MODEL.is_file() else None


@dataclass
class ProcResult:
    """One emulator process: the ranks it played, how it ended, what it wrote."""

    ranks: list[int]
    returncode: int
    stderr: str
    calls: list[Record]
    summary: Record | None
    timed_out: bool = False


@dataclass
class RunResult:
    returncodes: list[int]
    calls: list[Record]
    replays: list[Record]
    summaries: list[Record]
    stderr: str
    trace: list[Record] = field(default_factory=list)
    # trace lines that are not JSON objects: the library wrote a line cut short or broken (the
    # emulator's ranks end cleanly, so no line is torn by a kill)
    trace_bad_lines: list[str] = field(default_factory=list)
    steps: list[Record] = field(default_factory=list)
    # `compute_spans=True`: one record per group's computation span, on the calls' clock (docs/emulator.md)
    compute: list[Record] = field(default_factory=list)
    workdir: Path | None = None
    procs: list[ProcResult] = field(default_factory=list)
    extra: list[ProcResult] = field(default_factory=list)

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

    def step_ms(self, grank: int = 0) -> list[float]:
        """Global rank `grank`'s training-step times on its GPU clock (scenarios with `step_end` groups):
        from one step's end to the next, so n step records give n - 1 times."""
        ends = sorted(int(r["end_ns"]) for r in self.steps if int(r["grank"]) == grank)
        return [(b - a) / 1e6 for a, b in itertools.pairwise(ends)]

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


def _read_jsonl(path: Path, bad: list[str] | None = None) -> list[Record]:
    """The JSON objects of a JSONL file; lines that are not one go to `bad` when given."""
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
            obj = None
        if isinstance(obj, dict):
            out.append(obj)
        elif bad is not None:
            bad.append(f"{path.name}: {line[:80]} ... {line[-80:]}")
    return out


def coord_env(host: str = "127.0.0.1") -> dict[str, str]:
    """AUTOCCL_COORD_ADDR (a free loopback port outside the ephemeral range, as `autoccl run` draws it: an
    ephemeral one was taken by other tests' sockets before the coordinator bound it, and a late rank found no
    coordinator, twice in three CI runs) and a fresh AUTOCCL_COORD_TOKEN for one job."""
    port = free_port(host)
    return {"AUTOCCL_COORD_ADDR": f"{host}:{port}", "AUTOCCL_COORD_TOKEN": secrets.token_hex(16)}


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
    rank_env: Mapping[int, Mapping[str, str]] | None = None,
    extra_procs: Sequence[tuple[Sequence[int], Mapping[str, str]]] = (),
    poll: Callable[[Path], None] | None = None,
    poll_interval: float = 0.2,
    extra_start_delay: float = 0.0,
    inherit_nccl: bool = True,
    compute_spans: bool = False,
) -> RunResult:
    """Play `scenario` on the emulator: all ranks as threads of one process, or one process per rank.

    plugin: "default" = the built libautoccl-nccl.so, None = plain NCCL (no plugin), or a path.
    env: variables added to a clean environment (no AUTOCCL_*/NCCL plugin settings inherited).
    compute_spans: the emulator writes each group's computation span (`RunResult.compute`): with the calls, a
      GPU timeline of every rank (autoccl.emu.timeline).
    inherit_nccl: whether this process's NCCL_* variables (NCCL_ALGO, NCCL_MAX_NCHANNELS, ...) reach the
      emulator, which honours them as NCCL does; off, only `env`'s and the safety variables do.
    rank_env: extra variables for the process(es) playing a given global rank (e.g. fault injection on
      the authority only).
    extra_procs: further processes (ranks, env overrides) started with the others, e.g. a rogue peer with a
      wrong token; their results are in `RunResult.extra` and not in `calls`. They start
      `extra_start_delay` s after the others.
    poll: called with the work directory every `poll_interval` s while the emulator runs (live progress).
    A process still running at `timeout` is killed (returncode 124 in the result: a hang).
    workdir: where the scenario, outputs, traces and tables go (kept). Without it they go to a temporary
      directory removed before returning (`RunResult.workdir` is then None), unless AUTOCCL_EMU_KEEP=1.
    """
    # checked before any directory is made: a scenario the writer refuses left a temporary directory behind
    text = scenario.to_text()
    if not scenario.world:
        # one process per rank started no process and returned exit 0, as if the scenario had run
        raise ValueError("the scenario has no rank to play: give it a Comm with ranks")
    if plugin not in (None, "default") and not Path(plugin).is_file():
        # the emulator, as NCCL, would run without a tuner and exit 0: plain NCCL taken for the plugin
        raise ValueError(f"plugin {plugin}: no such file (None runs plain NCCL, 'default' the built plugin)")
    scratch = workdir is None and os.environ.get("AUTOCCL_EMU_KEEP", "") not in ("1", "true", "yes")
    work = Path(workdir) if workdir is not None else Path(tempfile.mkdtemp(prefix="autoccl-emu-"))
    work.mkdir(parents=True, exist_ok=True)
    scen_path = work / "scenario.txt"
    scen_path.write_text(text)
    exe = str(emulator_path())
    child_env = plain_nccl_env()
    if not inherit_nccl:
        child_env = {k: v for k, v in child_env.items() if not k.startswith("NCCL_") or k in SAFETY_ENV}
    # diagnostics only (every pin's evidence, INFO lines on the ranks' stderr): they change no decision
    if "AUTOCCL_SEARCH_DEBUG" in os.environ:
        child_env["AUTOCCL_SEARCH_DEBUG"] = os.environ["AUTOCCL_SEARCH_DEBUG"]
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
        # absolute: the emulator runs in the run's directory, where a relative path finds no library (and
        # NCCL, like the emulator, then runs without a tuner: a benchmark would silently measure plain NCCL)
        base += ["--plugin", str(plugin_path() if plugin == "default" else Path(plugin).resolve())]
    if model == "default":
        m = default_model()
        if m is not None:
            base += ["--model", str(m)]
    elif model is not None:
        base += ["--model", str(Path(model).resolve())]
    if compute_spans:
        base.append("--compute-spans")
    base += list(extra_args)
    if "AUTOCCL_SEARCH_DEBUG" in child_env and "--verbose" not in base:
        base.append("--verbose")  # the search's diagnostics are INFO lines of NCCL's log
    world = scenario.world
    rank_sets: list[tuple[list[int], dict[str, str], bool]] = []
    for ranks in [[r] for r in world] if processes else [world]:
        penv = dict(child_env)
        for r in ranks:
            penv.update((rank_env or {}).get(r, {}))
        rank_sets.append((ranks, penv, False))
    for ranks_x, env_x in extra_procs:
        penv = dict(child_env)
        penv.update(env_x)
        rank_sets.append((list(ranks_x), penv, True))
    procs: list[tuple[subprocess.Popen[str], Path, list[int], bool, IO[str], IO[str]]] = []
    arm_death_signal = _dies_with_parent()
    # a lead file left by an earlier run in this directory holds its final positions: the bound would be void
    (work / "lead.bin").unlink(missing_ok=True)
    if progress:
        progress("start", 0.0)
    delayed = False
    for n, (ranks, penv, is_extra) in enumerate(rank_sets):
        if is_extra and not delayed:
            delayed = True
            time.sleep(extra_start_delay)
        tag = "_".join(str(r) for r in ranks) + (f".extra{n}" if is_extra else "")
        truth = work / f"truth.{tag}.jsonl"
        cmd = [*base, "--ranks", ",".join(str(r) for r in ranks), "--truth", str(truth)]
        if processes and not is_extra:
            # Scenario.lead bounds the rank processes against each other too (extra processes, e.g. a
            # rogue peer, stay out of it)
            cmd += ["--lead-file", str(work / "lead.bin")]
        out_f = open(work / f"stdout.{tag}.txt", "w+")
        err_f = open(work / f"stderr.{tag}.txt", "w+")
        proc = subprocess.Popen(
            cmd, env=penv, stdout=out_f, stderr=err_f, text=True, cwd=work, preexec_fn=arm_death_signal
        )
        procs.append((proc, truth, ranks, is_extra, out_f, err_f))
    deadline = time.monotonic() + timeout
    timed_out = False
    done = 0
    try:
        while True:
            live = [p for p, *_ in procs if p.poll() is None]
            if progress and len(procs) - len(live) != done:
                done = len(procs) - len(live)
                progress("rank-process done", done / len(procs))
            if not live:
                break
            if time.monotonic() > deadline:
                timed_out = True
                _kill(live)
                break
            if poll:
                poll(work)
            time.sleep(poll_interval if poll else 0.02)
        if poll:
            poll(work)
    except BaseException:  # Ctrl-C that reached this process alone, a progress callback's error
        _kill([p for p, *_ in procs if p.poll() is None])
        raise
    codes: list[int] = []
    summaries: list[Record] = []
    errs: list[str] = []
    calls: list[Record] = []
    replays: list[Record] = []
    steps: list[Record] = []
    compute: list[Record] = []
    extra: list[ProcResult] = []
    per_proc: list[ProcResult] = []
    for proc, truth, ranks, is_extra, fo, fe in procs:
        fo.seek(0)
        fe.seek(0)
        out, err = fo.read(), fe.read()
        fo.close()
        fe.close()
        hung = timed_out and proc.returncode is not None and proc.returncode < 0 and "summary" not in out
        code = 124 if hung else int(proc.returncode if proc.returncode is not None else 124)
        if hung:
            err += f"autoccl-emu: timed out after {timeout}s (hang?)\n"
        summary: Record | None = None
        for line in out.splitlines():
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict) and obj.get("ev") == "summary":
                summary = obj
        mine: list[Record] = []
        for rec in _read_jsonl(truth):
            if rec.get("ev") == "call":
                mine.append(rec)
            elif is_extra:
                continue
            elif rec.get("ev") == "step":
                steps.append(rec)
            elif rec.get("ev") == "compute":
                compute.append(rec)
            else:
                replays.append(rec)
        pr = ProcResult(ranks=ranks, returncode=code, stderr=err, calls=mine, summary=summary, timed_out=hung)
        if is_extra:
            extra.append(pr)
            continue
        per_proc.append(pr)
        codes.append(code)
        errs.append(err)
        calls.extend(mine)
        if summary is not None:
            summaries.append(summary)
    records: list[Record] = []
    bad_lines: list[str] = []
    if trace:
        for f in sorted(work.glob("trace*.jsonl")):
            records.extend(_read_jsonl(f, bad_lines))
    if scratch:
        # everything the result carries has been read: a suite of thousands of runs must not fill /tmp
        shutil.rmtree(work, ignore_errors=True)
    return RunResult(
        returncodes=codes,
        calls=calls,
        replays=replays,
        summaries=summaries,
        steps=steps,
        compute=compute,
        stderr="".join(errs),
        trace=records,
        trace_bad_lines=bad_lines,
        workdir=None if scratch else work,
        procs=per_proc,
        extra=extra,
    )
