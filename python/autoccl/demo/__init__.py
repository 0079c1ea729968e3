"""`autoccl demo`: the real tuner library (mode online) in the NCCL emulator on a simulated 4 x H200 node.

Two emulator runs of the same training-like scenario (same seed, so the same noise per call):
  1. plain NCCL (no plugin): NCCL's own choice per task and its true kernel times;
  2. the library with AUTOCCL_MODE=online: what every rank applied per call and its true kernel time.
Everything reported comes from the emulator's ground truth (`--truth`), never from the library's own
claims: per task the configuration applied at the end, the call from which it no longer changed
("calls to converge"), and median true times of both runs over the same calls after that point.

See docs/demo.md.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoccl.emu import Call, Comm, Group, Scenario, coord_env, run
from autoccl.emu.online import online_unavailable
from autoccl.emu.runner import RunResult
from autoccl.emu.scenario import whole_elements

KIB = 1 << 10
MIB = 1 << 20
HW = "NVIDIA H200x4"  # the default cluster; a run labels its tables with its own GPU count (hardware_of)
DEFAULT_SIZES = (8 * MIB, 64 * MIB, 256 * MIB)  # FSDP all-gather / reduce-scatter per layer group
DEFAULT_BUCKETS = (25 * MIB, 4 * MIB)  # DDP all-reduce buckets (PyTorch's 25 MiB default + the tail)
LIGHT_GEMM = 0.35
# A task counts as converged when its last configuration held for at least this many calls.
MIN_STABLE = 10

Record = dict[str, Any]


def hardware_of(cfg: DemoConfig) -> str:
    """The simulated cluster as the plugin's fingerprint names it: one H200 per rank on one host."""
    return f"NVIDIA H200x{cfg.ranks}"


Progress = Callable[[str, float, dict[str, int]], None]


class DemoUnavailable(RuntimeError):
    """The library at hand cannot run the demo (mode online missing, emulator not built)."""


@dataclass
class DemoConfig:
    ranks: int = 4
    comms: int = 2
    sizes: tuple[int, ...] = DEFAULT_SIZES
    buckets: tuple[int, ...] = DEFAULT_BUCKETS
    steps: int = 240
    seed: int = 1
    load: float = LIGHT_GEMM
    processes: bool = False
    timeout: float = 300.0

    def validate(self) -> None:
        if not 2 <= self.ranks <= 64:
            raise ValueError("ranks must be in [2, 64]")
        if self.comms < 1:
            raise ValueError("comms must be >= 1")
        if self.steps < 20:
            raise ValueError("steps must be >= 20 (the search needs calls to converge)")
        if not self.sizes and not self.buckets:
            raise ValueError("no collective to run: --sizes and --buckets are both empty")
        if any(s <= 0 for s in (*self.sizes, *self.buckets)):
            raise ValueError("sizes must be positive")
        for s in self.sizes:  # all-gather / reduce-scatter sizes are rounded down to whole elements per rank
            if whole_elements("allgather", s, self.ranks) == 0:
                raise ValueError(
                    f"--sizes: {s} B is less than one 4-byte element on each of {self.ranks} ranks"
                )
        if any(whole_elements("allreduce", b, self.ranks) == 0 for b in self.buckets):
            raise ValueError("--buckets: a bucket must hold at least one 4-byte element")
        # two sizes that one communicator calls with the same element count are one task, called twice a step
        # (8M,8M ran as one task of 2 x --steps calls, without a word)
        seen: dict[tuple[str, str, int], int] = {}
        given = [*self.sizes, *reversed(self.sizes), *self.buckets]  # task_plan's order
        for (comm, calls), nbytes in zip(task_plan(self), given, strict=True):
            key = (comm, calls[0].coll, calls[0].nbytes)
            if key in seen:
                option = "--buckets" if calls[0].coll == "allreduce" else "--sizes"
                raise ValueError(
                    f"{option}: {seen[key]} B and {nbytes} B are one task ({calls[0].coll} of "
                    f"{calls[0].nbytes} B on one communicator); give each size once"
                )
            seen[key] = nbytes

    def communicators_used(self) -> int:
        """The communicators that get collectives (with --comms 2 and no buckets, only the FSDP group)."""
        return len({comm for comm, _ in task_plan(self)})


@dataclass(frozen=True)
class TaskKey:
    comm: str
    coll: str
    nbytes: int  # nBytes as NCCL hands it to the tuner (aggregated: the sum)


@dataclass
class TaskResult:
    key: TaskKey
    calls: int
    nccl_config: str
    tuned_config: str
    converged_at: int | None  # first call index from which the applied configuration never changed
    nccl_us: float  # median true time of NCCL's choice (plain run) over the calls after convergence
    tuned_us: float  # median true time of the tuned run over the same calls
    trace_nccl: list[float] = field(default_factory=list)  # per call, true us (plain NCCL)
    trace_tuned: list[float] = field(default_factory=list)  # per call, true us (online)

    @property
    def gain(self) -> float:
        """Relative time saved: 1 - tuned / NCCL (0.2 = 20 % faster)."""
        return 1.0 - self.tuned_us / self.nccl_us if self.nccl_us > 0 else 0.0


@dataclass
class DemoResult:
    config: DemoConfig
    tasks: list[TaskResult]
    plain: RunResult
    online: RunResult

    @property
    def total_gain(self) -> float:
        n = sum(t.nccl_us for t in self.tasks)
        return 1.0 - sum(t.tuned_us for t in self.tasks) / n if n else 0.0


def task_plan(cfg: DemoConfig) -> list[tuple[str, tuple[Call, ...]]]:
    """One training step: FSDP all-gathers (forward), reduce-scatters (backward), DDP all-reduce buckets.
    Collectives are spread over `comms` communicators round-robin (e.g. an FSDP and a DDP group)."""
    steps: list[tuple[str, tuple[Call, ...]]] = []
    names = [f"c{i}" for i in range(cfg.comms)]
    work: list[tuple[Call, ...]] = []

    # rounded down to sizes NCCL can be called with, as nccl-tests rounds (float32 elements, the same number
    # on every rank for all-gather / reduce-scatter)
    def call(coll: str, nbytes: int) -> tuple[Call, ...]:
        return (Call(coll, whole_elements(coll, nbytes, cfg.ranks)),)

    work += [call("allgather", s) for s in cfg.sizes]
    work += [call("reducescatter", s) for s in reversed(cfg.sizes)]
    work += [call("allreduce", b) for b in cfg.buckets]
    for i, calls in enumerate(work):
        if cfg.comms == 1:
            comm = names[0]
        elif cfg.comms == 2:  # an FSDP group (all-gather / reduce-scatter) and a DDP group (all-reduce)
            comm = names[1] if calls[0].coll == "allreduce" else names[0]
        else:
            comm = names[i % cfg.comms]
        steps.append((comm, calls))
    return steps


def build_scenario(cfg: DemoConfig) -> Scenario:
    cfg.validate()
    ranks = tuple(range(cfg.ranks))
    plan = task_plan(cfg)
    used = sorted({c for c, _ in plan}, key=lambda n: int(n[1:]))
    comms = [Comm(name=n, hash=0xD3A0_0000 + 0x101 * (i + 1), ranks=ranks) for i, n in enumerate(used)]
    groups = [Group(comm, calls, repeat=1, load=cfg.load) for _ in range(cfg.steps) for comm, calls in plan]
    # lead=8: the rank threads of one process start a group at most 8 groups ahead of the slowest (one
    # host thread launching every GPU, steps that synchronize the host). Unbounded, rank 0's GPU timings
    # trailed the other ranks' requests by ~150 calls and most tasks could not pin within 240 calls.
    return Scenario(comms=comms, groups=groups, seed=cfg.seed, runahead=4, reorder=4, load=cfg.load, lead=8)


def _cfg_str(algo: str, proto: str, channels: int, chunk: int) -> str:
    s = f"{algo}/{proto}/{channels}ch"
    if chunk:
        s += f"/{chunk // KIB}K" if chunk % KIB == 0 else f"/{chunk}B"
    return s


def _cfg_of(r: Record) -> tuple[str, str, int, int]:
    return (str(r["algo"]), str(r["proto"]), int(r["channels"]), int(r["chunk"]))


def _per_task(calls: list[Record]) -> dict[TaskKey, dict[int, Record]]:
    """Rank 0's record per (task, call index); ground truth from the emulator."""
    out: dict[TaskKey, dict[int, Record]] = defaultdict(dict)
    for r in calls:
        if int(r["rank"]) != 0 or int(r.get("graph", 0)):
            continue
        key = TaskKey(str(r["comm"]), str(r["coll"]), int(r["task_bytes"]))
        out[key].setdefault(int(r["call"]), r)
    return out


def analyse(plain: RunResult, online: RunResult) -> list[TaskResult]:
    p_tasks, o_tasks = _per_task(plain.calls), _per_task(online.calls)
    results: list[TaskResult] = []
    for key in sorted(o_tasks, key=lambda k: (k.comm, k.coll, k.nbytes)):
        orec, prec = o_tasks[key], p_tasks.get(key, {})
        idx = sorted(i for i in orec if i in prec)
        if not idx:
            continue
        cfgs = [
            (orec[i]["algo"], orec[i]["proto"], int(orec[i]["channels"]), int(orec[i]["chunk"])) for i in idx
        ]
        last = cfgs[-1]
        conv = len(cfgs) - 1
        while conv > 0 and cfgs[conv - 1] == last:
            conv -= 1
        stable = len(cfgs) - conv
        converged_at = idx[conv] if stable >= MIN_STABLE else None
        tail = idx[conv:] if converged_at is not None else idx[-max(1, len(idx) // 4) :]
        p0 = prec[idx[0]]
        results.append(
            TaskResult(
                key=key,
                calls=len(idx),
                nccl_config=_cfg_str(p0["algo"], p0["proto"], int(p0["channels"]), int(p0["chunk"])),
                tuned_config=_cfg_str(*last),
                converged_at=converged_at,
                nccl_us=statistics.median(prec[i]["dur_ns"] / 1000.0 for i in tail),
                tuned_us=statistics.median(orec[i]["dur_ns"] / 1000.0 for i in tail),
                trace_nccl=[prec[i]["dur_ns"] / 1000.0 for i in idx],
                trace_tuned=[orec[i]["dur_ns"] / 1000.0 for i in idx],
            )
        )
    return results


def _check(res: RunResult, what: str) -> None:
    if res.returncode != 0 or res.divergences:
        tail = res.stderr.strip()[-2000:]
        raise RuntimeError(f"the {what} emulator run failed (exit {res.returncodes}): {tail}")
    if not res.calls:
        raise RuntimeError(f"the {what} emulator run recorded no calls")
    if res.trace_bad_lines:  # the report is read from the traces: a broken line would drop a task silently
        raise RuntimeError(
            f"the {what} emulator run's trace has lines that are not JSON: {res.trace_bad_lines[:2]}"
        )


def run_demo(
    cfg: DemoConfig, out_dir: Path, progress: Progress | None = None, plugin: str | Path = "default"
) -> DemoResult:
    """Run both emulator runs and analyse them. Raises DemoUnavailable when mode online is missing."""
    reason = online_unavailable(plugin)
    if reason is not None:
        raise DemoUnavailable(f"mode online is not available in this autoccl library: {reason}")
    scenario = build_scenario(cfg)
    out_dir.mkdir(parents=True, exist_ok=True)
    total = len(scenario.groups) * len(scenario.world)
    if progress:
        progress("NCCL alone", 0.0, {})
    # NCCL_* variables of the shell (NCCL_ALGO, NCCL_MAX_NCHANNELS, ...) stay out of both runs: the demo shows
    # the tuner against NCCL's defaults on the calibrated machine (the CLI names those it leaves out)
    plain = run(scenario, plugin=None, workdir=out_dir / "emu-nccl", timeout=cfg.timeout, inherit_nccl=False)
    _check(plain, "plain-NCCL")
    if progress:
        progress("NCCL alone", 1.0, {})
    # The demo measures each task against NCCL's choice on the same calls. The step guard's rounds (which run
    # every task on NCCL's choice for some iterations after the searches end) would put NCCL's times into the
    # tuned tail; its own tests are tests/emu/test_step_guard.py. Over TCP (ranks as processes) the tasks
    # follow the in-process minimum: the emulator's coordinator runs on one host.
    env = {
        "AUTOCCL_MODE": "online",
        "AUTOCCL_HW": hardware_of(cfg),
        "AUTOCCL_GUARD": "off",
        "AUTOCCL_MIN_TASK_US_TCP": "55",
    }
    if cfg.processes:
        env.update(coord_env())
    watcher = _TraceWatcher(total, progress) if progress else None
    online = run(
        scenario,
        plugin=plugin,
        env=env,
        processes=cfg.processes,
        inherit_nccl=False,
        workdir=out_dir / "emu-online",
        timeout=cfg.timeout,
        poll=watcher,
    )
    _check(online, "online")
    if progress:
        progress("autoccl online", 1.0, {})
    return DemoResult(cfg, analyse(plain, online), plain, online)


class _TraceWatcher:
    """Live progress from the library's trace files (calls decided so far, per task on rank 0)."""

    def __init__(self, total: int, progress: Progress) -> None:
        self.total = max(1, total)
        self.progress = progress
        self.offsets: dict[Path, int] = {}
        self.calls = 0
        self.per_task: dict[str, int] = defaultdict(int)

    def __call__(self, work: Path) -> None:
        import json

        for f in sorted(work.glob("trace*.jsonl")):
            off = self.offsets.get(f, 0)
            with f.open("rb") as fh:
                fh.seek(off)
                data = fh.read()
            end = data.rfind(b"\n") + 1
            self.offsets[f] = off + end
            for line in data[:end].splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if rec.get("ev") == "call":
                    self.calls += 1
                    if rec.get("rank") == 0:
                        self.per_task[f"{rec.get('coll')} {rec.get('bytes')}"] += 1
        self.progress("autoccl online", min(1.0, self.calls / self.total), dict(self.per_task))
