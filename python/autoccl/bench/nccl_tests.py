"""`autoccl bench nccl-tests`: NVIDIA's nccl-tests under plain NCCL and under autoccl modes, launched in
interleaved passes (plain, tuned, plain, tuned, ...) on one machine, with each pass's ratio to plain NCCL,
its spread and confidence interval, and the plain-vs-plain spread that says how much of a difference is
noise. Plain NCCL alone moves by up to a third between two launches on the machines this was built on, so
a single pair of launches proves nothing either way.

A mode is a name and the `autoccl run` options that make it (none: plain NCCL). Every autoccl mode gets
its own tuning cache under the output directory, so the first pass of `online` starts cold and later
passes start from the table the earlier ones wrote, as a user's second job would.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoccl import jsonout, settings
from autoccl.bench.trace import read_records, trace_files, unreadable_lines
from autoccl.figures import save_figure
from autoccl.tuner_env import OWN_PREFIXES, PLUGIN_VARS, SAFETY_ENV

COLLS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast", "reduce")
LAUNCHES = ("single", "mpi")
ORDERS = ("rotate", "fixed")

# Built-in modes: `autoccl run` options and VAR=VALUE assignments (None: plain NCCL, no plugin). `{empty}` is
# a cache directory that never holds a table; `{cache:NAME}` is mode NAME's cache of the same launch kind (a
# `table` start from what `online` wrote earlier in the same pass: `table-warm:--mode table --cache-dir
# {cache:online}`). `idle` is the plugin loaded and deciding nothing: table mode with no table, without the
# step guard (under it table mode decides through the coordinator, as online mode does).
BUILTIN_MODES: dict[str, list[str] | None] = {
    "plain": None,
    "online": [],
    "observe": ["--mode", "observe"],
    "idle": ["--mode", "table", "--cache-dir", "{empty}", "AUTOCCL_GUARD=off"],
    "table": ["--mode", "table"],
}

# A result row of nccl-tests' text output: size count type redop root, then time algbw busbw #wrong for
# out-of-place and for in-place (#wrong is N/A without -c).
_ROW = re.compile(
    r"^\s+(\d+)\s+(\d+)\s+(\w+)\s+(\S+)\s+(-?\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\S+)"
)


class BenchError(Exception):
    """A usage or environment problem, reported as one sentence."""


@dataclass(frozen=True)
class Mode:
    name: str
    run_args: tuple[str, ...] | None  # None: plain NCCL
    env: tuple[tuple[str, str], ...] = ()

    @property
    def plain(self) -> bool:
        return self.run_args is None


def parse_mode(text: str) -> Mode:
    """`NAME` (built-in) or `NAME:ARGS`, ARGS being `autoccl run` options and VAR=VALUE assignments, e.g.
    `observe-kernel:--mode observe AUTOCCL_CLOCK=kernel` or `plain64:plain NCCL_MIN_CTAS=64`."""
    name, sep, rest = text.partition(":")
    name = name.strip()
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", name):
        raise BenchError(f"mode name {name!r} must be letters, digits, '.', '_' or '-'")
    if not sep:
        if name not in BUILTIN_MODES:
            raise BenchError(
                f"unknown mode {name!r}: built-in modes are {', '.join(BUILTIN_MODES)}; "
                "give others as NAME:ARGS (autoccl run options, VAR=VALUE)"
            )
        args = BUILTIN_MODES[name]
        if args is None:
            return Mode(name, None)
        tokens = list(args)
    else:
        tokens = shlex.split(rest)
    env = tuple(
        (t.split("=", 1)[0], t.split("=", 1)[1]) for t in tokens if re.match(r"^[A-Z_][A-Z0-9_]*=", t)
    )
    args = [t for t in tokens if not re.match(r"^[A-Z_][A-Z0-9_]*=", t)]
    if args[:1] == ["plain"]:
        if len(args) > 1:
            raise BenchError(f"mode {name!r}: 'plain' takes no autoccl options, only VAR=VALUE")
        return Mode(name, None, env)
    return Mode(name, tuple(args), env)


def parse_rows(text: str) -> list[dict[str, Any]]:
    """nccl-tests' result rows (out-of-place `oop_*`, in-place `ip_*`; `*_wrong` None without -c); `cycle`
    counts the passes over the sizes (nccl-tests -N), from 0."""
    rows: list[dict[str, Any]] = []
    cycle, last_bytes = 0, -1
    for line in text.splitlines():
        m = _ROW.match(line)
        if not m:
            continue
        g = m.groups()
        if int(g[0]) <= last_bytes:
            cycle += 1
        last_bytes = int(g[0])

        def wrong(s: str) -> int | None:
            return None if s == "N/A" else int(float(s))

        rows.append(
            {
                "bytes": int(g[0]),
                "count": int(g[1]),
                "dtype": g[2],
                "oop_time_us": float(g[5]),
                "oop_algbw_gbs": float(g[6]),
                "oop_busbw_gbs": float(g[7]),
                "oop_wrong": wrong(g[8]),
                "ip_time_us": float(g[9]),
                "ip_algbw_gbs": float(g[10]),
                "ip_busbw_gbs": float(g[11]),
                "ip_wrong": wrong(g[12]),
                "cycle": cycle,
            }
        )
    return rows


def size_arg(text: str) -> int:
    """Bytes from `1M`, `512K`, `1G`, `4096` (binary units)."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)B?\s*", text, re.IGNORECASE)
    if not m:
        raise BenchError(f"size {text!r} is not a number of bytes with an optional K, M or G")
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def cross_rank_agreement(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Every rank of a communicator must have applied the same configuration on the k-th call of a task
    (from the plugin's `call` trace records of every process of a launch)."""
    applied: dict[tuple[Any, ...], dict[Any, tuple[Any, ...]]] = {}
    for rec in records:
        if rec.get("ev") != "call":
            continue
        key = (rec.get("comm"), rec.get("coll"), rec.get("bytes"), rec.get("pipe"), rec.get("call"))
        cfg = tuple(rec.get(k) for k in ("algo", "proto", "channels", "chunk", "chunk_halvings"))
        applied.setdefault(key, {})[rec.get("rank")] = cfg
    divergent = [k for k, per_rank in applied.items() if len(set(per_rank.values())) > 1]
    return {
        "calls_compared": sum(1 for per_rank in applied.values() if len(per_rank) > 1),
        "divergent_calls": len(divergent),
        "divergent_examples": [str(k) for k in divergent[:3]],
    }


def no_tuner_reasons(records: Iterable[Mapping[str, Any]]) -> list[str]:
    """Why the tuner did not engage on a communicator (`no_tuner` trace records): a launch whose tuner
    refused to run measured the plugin loaded, not its tuning, and NCCL prints the refusal only under
    NCCL_DEBUG."""
    return sorted({str(r.get("why")) for r in records if r.get("ev") == "no_tuner"})


_NO_TUNER_WARN = re.compile(r"NCCL WARN autoccl: (?:comm \S+ rank -?\d+: )?(.*); behaving as no tuner")


def no_tuner_warnings(output: str) -> list[str]:
    """The same reasons from a launch's output: the library's WARN when its tuner cannot engage."""
    return sorted({m.group(1) for m in _NO_TUNER_WARN.finditer(output)})


def pinned_tasks(records: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The authority's per-task summaries (`task` records of rank 0): what was pinned, against NCCL's."""
    out = []
    for rec in records:
        if rec.get("ev") == "task" and rec.get("rank") == 0:
            out.append(
                {
                    k: rec.get(k)
                    for k in (
                        "coll",
                        "bytes",
                        "calls",
                        "source",
                        "algo",
                        "proto",
                        "channels",
                        "chunk_halvings",
                        "nccl_algo",
                        "nccl_proto",
                        "nccl_channels",
                        "ran_algo",
                        "ran_proto",
                        "ran_channels",
                        "gain",
                        "converged_at",
                        "default_us",
                        "best_us",
                        "samples",
                        "median_us",
                        "small_task",
                        "small_by_model",
                        "model_us",
                        "table_default",
                        "regret_us",
                        "wait_regret_us",
                        "regret_stop",
                        "job_regret_stop",
                        "nccl_own_incumbent",
                        "skipped_behind",
                        "recorded_starts",
                        "regret_waits",
                    )
                    if k in rec
                }
            )
    return out


def coordinator_stats(records: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What a launch's segment lookups cost its ranks, from the traces of a launch decided over TCP: per
    communicator and rank the `task` records' lookups (those that asked the authority: `lookups_asked`),
    summed over the launch's tasks, and the `board` record (its process's coordinator client: how it
    connected). None when no rank was decided over TCP (no `board` record)."""
    ranks: dict[tuple[str, int], dict[str, Any]] = {}
    for rec in records:
        ev, rank = rec.get("ev"), rec.get("rank")
        if ev not in ("board", "task") or not isinstance(rank, int):
            continue
        key = (str(rec.get("comm", "")), rank)
        r = ranks.setdefault(
            key,
            {
                "board": None,
                "lookups": 0,
                "asked": 0,
                "lookup_ms": 0.0,
                "slowest_lookup_us": 0.0,
                "slowest_first_lookup_us": 0.0,
            },
        )
        if ev == "board":
            r["board"] = rec
            continue
        if rec.get("board") != "tcp":
            continue
        r["lookups"] += int(rec.get("lookups") or 0)
        r["asked"] += int(rec.get("lookups_asked") or 0)
        r["lookup_ms"] += float(rec.get("lookup_us") or 0.0) / 1000.0
        r["slowest_lookup_us"] = max(r["slowest_lookup_us"], float(rec.get("lookup_max_us") or 0.0))
        first = [float(us) for k, us in rec.get("slow_lookups") or [] if int(k) == 0]
        if first:
            r["slowest_first_lookup_us"] = max(r["slowest_first_lookup_us"], first[0])
    per_rank = []
    for (comm, rank), r in sorted(ranks.items()):
        b = r["board"]
        if b is None:
            continue
        per_rank.append(
            {
                "comm": comm,
                "rank": rank,
                "lookups": r["lookups"],
                "lookups_asked": r["asked"],
                "lookup_ms": round(r["lookup_ms"], 3),
                "slowest_lookup_us": r["slowest_lookup_us"],
                "slowest_first_lookup_us": r["slowest_first_lookup_us"],
                "first_auth_ms": float(b.get("first_auth_ms", -1.0)),
                "connect_failures": int(b.get("connect_failures") or 0),
                "reconnects": int(b.get("reconnects") or 0),
                # the authority's answer time as the client measured it (0: none timed, or an older plugin)
                "round_trip_us": float(b.get("round_trip_us") or 0.0),
                "round_trip_max_us": float(b.get("round_trip_max_us") or 0.0),
            }
        )
    return {"ranks": per_rank} if per_rank else None


def coordinator_table(records: Sequence[Mapping[str, Any]]) -> str:
    """Per traced launch decided over TCP, each rank's coordinator: how many segment lookups it made and how
    many of them waited for the authority, the time they took, the slowest (and the slowest at a task's first
    call: a job's start), the authority's answer time (round trip: running mean, longest) and how its client
    connected (after how long, how many refusals, reconnects)."""
    lines = [
        "| pass | launch | collective | mode | rank | lookups | asked the authority | lookup ms | slowest µs "
        "| slowest first µs | round trip µs (mean / max) | connected after ms | refused | reconnects |",
        "| ---: | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for r in sorted(records, key=lambda x: (x["pass"], x["launch"], x["coll"], x["mode"])):
        for c in (r.get("coordinator") or {}).get("ranks", []):
            auth = f"{c['first_auth_ms']:.1f}" if c["first_auth_ms"] >= 0 else "never"
            lines.append(
                f"| {r['pass']} | {r['launch']} | {r['coll']} | {r['mode']} | {c['rank']} | {c['lookups']} "
                f"| {c['lookups_asked']} | {c['lookup_ms']:.1f} | {c['slowest_lookup_us']:.0f} "
                f"| {c['slowest_first_lookup_us']:.0f} "
                f"| {c.get('round_trip_us', 0.0):.0f} / {c.get('round_trip_max_us', 0.0):.0f} "
                f"| {auth} | {c['connect_failures']} "
                f"| {c['reconnects']} |"
            )
    return "\n".join(lines) + "\n"


@dataclass
class Plan:
    bin_dir: Path
    out: Path
    colls: list[str]
    modes: list[Mode]
    launches: list[str]
    gpus: int
    begin: int
    end: int
    factor: int
    warmup: int
    iters: int
    passes: int
    timeout: float
    trace: bool = False
    extra_args: list[str] = field(default_factory=list)
    mpirun: str = "mpirun"
    baseline: str = "plain"
    order: str = "rotate"

    def binary(self, coll: str, launch: str) -> Path:
        return self.bin_dir / (f"{coll}_perf_mpi" if launch == "mpi" else f"{coll}_perf")

    def validate_binaries(self) -> None:
        """The nccl-tests build, the collectives and the launcher: checked first, before the GPUs are
        counted (a wrong --bin is the problem to name, not a missing nvidia-smi)."""
        for option, names in (("--colls", self.colls), ("--launch", self.launches)):
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                # each would be launched twice a pass, the second launch's log over the first's
                raise BenchError(f"{option} names {', '.join(twice)} more than once")
        if not self.bin_dir.is_dir():
            raise BenchError(f"--bin {self.bin_dir}: no such directory (build nccl-tests there first)")
        for coll in self.colls:
            if coll not in COLLS:
                raise BenchError(f"unknown collective {coll!r}: expected some of {', '.join(COLLS)}")
            for launch in self.launches:
                exe = self.binary(coll, launch)
                if not os.access(exe, os.X_OK):
                    hint = " (build nccl-tests with MPI=1 for --launch mpi)" if launch == "mpi" else ""
                    raise BenchError(f"{exe} is missing or not executable{hint}")
        if "mpi" in self.launches and shutil.which(self.mpirun) is None:
            raise BenchError(f"--launch mpi needs {self.mpirun!r} on PATH")

    def validate(self) -> None:
        self.validate_binaries()
        names = [m.name for m in self.modes]
        if len(set(names)) != len(names):
            raise BenchError(f"mode names must differ: {', '.join(names)}")
        if self.baseline not in names:
            raise BenchError(f"the baseline mode {self.baseline!r} is not among --mode ({', '.join(names)})")
        for i, mode in enumerate(self.modes):
            for ref in _CACHE_OF.findall(" ".join(mode.run_args or ())):
                if ref not in names[:i] or self.modes[names.index(ref)].plain:
                    raise BenchError(
                        f"mode {mode.name!r} reads {{cache:{ref}}}, which is not an autoccl mode before it "
                        "(a launch reads the table a mode earlier in the same pass wrote)"
                    )
        if self.order not in ORDERS:
            raise BenchError(f"--order {self.order!r}: expected one of {', '.join(ORDERS)}")
        if self.gpus < 1:
            raise BenchError("--gpus must be at least 1")
        if self.passes < 1:
            raise BenchError("--passes must be at least 1")
        if not (0 < self.begin <= self.end):
            raise BenchError("the sizes must satisfy 0 < --begin <= --end")
        if self.factor < 2:
            raise BenchError("--factor must be at least 2")
        if self.iters < 1:
            raise BenchError("--iters must be at least 1")
        if self.warmup < 0:
            raise BenchError("--warmup must be at least 0")
        if not self.timeout > 0:
            raise BenchError("--timeout must be more than 0 seconds")
        own = own_option_in(self.extra_args)
        if own:
            raise BenchError(f"--nt-args {shlex.join(self.extra_args)!r} gives {own}: the harness passes it")


# nccl-tests options the harness passes itself (and records in each launch's settings), with the harness
# option that sets each: one given again in --nt-args would win (nccl-tests reads its options in order, the
# last one counts), and the launch would run other sizes, iterations or GPUs than its record and header say.
_OWN_NT_OPTIONS = {
    "b": "-b/--begin",
    "minbytes": "-b/--begin",
    "e": "-e/--end",
    "maxbytes": "-e/--end",
    "f": "-f/--factor",
    "stepfactor": "-f/--factor",
    "i": "-f/--factor (the sizes grow by a factor)",
    "stepbytes": "-f/--factor (the sizes grow by a factor)",
    "w": "-w/--warmup",
    "warmup_iters": "-w/--warmup",
    "n": "-n/--iters",
    "iters": "-n/--iters",
    "c": "none: every launch runs -c 1, which the data errors come from",
    "check": "none: every launch runs -c 1, which the data errors come from",
    "g": "-g/--gpus",
    "ngpus": "-g/--gpus",
}


def own_option_in(args: Sequence[str]) -> str | None:
    """The first nccl-tests option in ARGS that the harness sets itself, as written, with the harness's own
    option for it ("-n (set it with -n/--iters)"); None if there is none. Every nccl-tests option but -h takes
    a value, attached (`-n5`, `--iters=5`) or as the next word."""
    expect_value = False
    for a in args:
        if expect_value:
            expect_value = False
            continue
        if a.startswith("--") and len(a) > 2:
            name, eq, _ = a[2:].partition("=")
            expect_value = not eq
        elif a.startswith("-") and len(a) > 1 and not a[1].isdigit():
            name = a[1]
            expect_value = len(a) == 2 and name != "h"
        else:
            continue
        if name in _OWN_NT_OPTIONS:
            shown = a.partition("=")[0] if a.startswith("--") else a[:2]
            return f"{shown} (set it with {_OWN_NT_OPTIONS[name]})"
    return None


def child_env(mode: Mode, base: Mapping[str, str]) -> dict[str, str]:
    """The launch's environment: ours removed (a plain run really is plain), multicast off, the mode's
    own assignments on top."""
    env = {
        k: v
        for k, v in base.items()
        if k == "AUTOCCL_LIB_DIR" or (not k.startswith(OWN_PREFIXES) and k not in PLUGIN_VARS)
    }
    env.update(SAFETY_ENV)
    # NCCL prints WARN lines only when asked: the library's refusal to tune (no_tuner_warnings) then reaches
    # an untraced launch's log too, and plain NCCL prints nothing more at this level
    env.setdefault("NCCL_DEBUG", "WARN")
    env.update(dict(mode.env))
    return env


def launch_command(plan: Plan, mode: Mode, coll: str, launch: str, pass_no: int) -> list[str]:
    exe = str(plan.binary(coll, launch))
    nt = [
        "-b",
        str(plan.begin),
        "-e",
        str(plan.end),
        "-f",
        str(plan.factor),
        "-w",
        str(plan.warmup),
        "-n",
        str(plan.iters),
        "-c",
        "1",
        *plan.extra_args,
    ]
    if launch == "mpi":
        body = [plan.mpirun, "-np", str(plan.gpus), exe, "-g", "1", *nt]
    else:
        body = [exe, "-g", str(plan.gpus), *nt]
    if mode.plain:
        return body
    args = run_options(plan, mode, launch)
    if plan.trace:
        args += ["--trace", str(trace_prefix(plan, mode, coll, launch, pass_no))]
    return [sys.executable, "-m", "autoccl", "run", *args, "--", *body]


def run_options(plan: Plan, mode: Mode, launch: str) -> list[str]:
    """The `autoccl run` options of an autoccl mode's launch (--trace apart): the mode's own, its
    placeholders expanded, and its cache under the output folder unless it names one."""
    assert mode.run_args is not None
    args = [_expand_cache_dirs(a, plan, launch) for a in mode.run_args]
    if "--cache-dir" not in args:
        args += ["--cache-dir", str(plan.out / "cache" / f"{mode.name}-{launch}")]
    return args


# Why `autoccl run OPTIONS -- ...` in an environment would refuse to start (None: it would start), found
# without starting anything: `autoccl.cli.tuner.run_options_problem`, handed in by the CLI.
OptionsCheck = Callable[[Sequence[str], Mapping[str, str]], "str | None"]


def check_modes(plan: Plan, check: OptionsCheck) -> None:
    """Every autoccl mode's options and assignments as each of its launches would get them, before the first
    launch: one a launch would refuse fails every launch of the mode, after the plain ones spent their GPU
    time. An AUTOCCL_* assignment that is no autoccl setting is refused too (a typo the library ignores)."""
    for mode in plan.modes:
        if mode.plain:
            continue
        for name, _ in mode.env:
            if name.startswith("AUTOCCL_") and name not in settings.BY_NAME:
                close = settings.closest(name)
                hint = f" (did you mean {close}?)" if close else ""
                raise BenchError(
                    f"mode {mode.name!r}: {name} is no autoccl setting{hint}; nothing was launched"
                )
        for launch in plan.launches:
            why = check(run_options(plan, mode, launch), child_env(mode, os.environ))
            if why:
                raise BenchError(f"mode {mode.name!r}: {why.rstrip('.')}; nothing was launched")


_CACHE_OF = re.compile(r"\{cache:([A-Za-z0-9_.-]+)\}")


def _expand_cache_dirs(arg: str, plan: Plan, launch: str) -> str:
    arg = arg.replace("{empty}", str(plan.out / "cache" / "empty"))
    return _CACHE_OF.sub(lambda m: str(plan.out / "cache" / f"{m.group(1)}-{launch}"), arg)


def pass_order(modes: Sequence[Mode], pass_no: int, order: str = "rotate") -> list[Mode]:
    """The modes' launch order in pass PASS_NO. `rotate` turns the order by one place a pass, so that over
    as many passes as places every mode runs at each place once: a machine that warms up or slows down over a
    pass (a GPU's clocks, the page cache, a socket's buffers) then weighs on each mode alike instead of always
    on the one launched last. A mode that reads another's table ({cache:NAME}) travels with NAME, right
    after it, as one place (with every NAME it reads). `fixed` keeps the order as given."""
    if order == "fixed" or not modes:
        return list(modes)
    units: list[list[Mode]] = []
    for mode in modes:
        refs = set(_CACHE_OF.findall(" ".join(mode.run_args or ())))
        at = [i for i, u in enumerate(units) if any(m.name in refs for m in u)]
        if not at:
            units.append([mode])
            continue
        # the places of the modes it reads become one place, at the first of them, the reader last
        merged = [m for i in at for m in units[i]] + [mode]
        units = [u for i, u in enumerate(units) if i not in at]
        units.insert(at[0], merged)
    k = pass_no % len(units)
    return [m for unit in units[k:] + units[:k] for m in unit]


def trace_prefix(plan: Plan, mode: Mode, coll: str, launch: str, pass_no: int) -> Path:
    return plan.out / "traces" / mode.name / f"p{pass_no}_{coll}_{launch}"


def run_plan(
    plan: Plan,
    progress: Callable[[str, int, int], None] | None = None,
    notify: Callable[[str], None] | None = None,
    check: OptionsCheck | None = None,
) -> list[dict[str, Any]]:
    """Every launch, interleaved: for each pass, each launch kind, each collective, each mode in turn (in
    the pass's order, `pass_order`). Lines an earlier, killed run left unreadable are set aside first
    (`set_aside_unreadable`; NOTIFY is told how many) and the launches they held run again. With CHECK, the
    autoccl modes' options are checked before anything is launched (`check_modes`).
    Returns one record per launch (rows, return code, duration, data errors, trace checks)."""
    plan.validate()
    results_path = plan.out / "launches.jsonl"
    lines = split_launches(results_path)  # read once: checked here, set aside below
    check_resume(plan, lines.records, results_path)
    # the folders the options name exist before they are checked; a refused plan leaves none of them behind
    folders = (plan.out / "logs", plan.out / "cache", plan.out / "cache" / "empty")
    made = [d for d in folders if not d.exists()]
    for d in folders:
        d.mkdir(parents=True, exist_ok=True)
    if check is not None:
        try:
            check_modes(plan, check)
        except BenchError:
            for d in reversed(made):  # deepest first; only the empty folders this run made
                with contextlib.suppress(OSError):
                    d.rmdir()
            raise
    earlier, set_aside = set_aside_unreadable(results_path, lines)
    if set_aside and notify:
        notify(
            f"set {unreadable_lines(set_aside)} of {results_path} aside in {results_path}{UNREADABLE_SUFFIX} "
            "(an earlier run cut short); the launches of this plan it lacks run now"
        )
    done = _finished(earlier)
    total = plan.passes * len(plan.launches) * len(plan.colls) * len(plan.modes)
    count = 0
    records: list[dict[str, Any]] = list(done.values())
    with open(results_path, "a") as sink:
        for p in range(plan.passes):
            for launch in plan.launches:
                for coll in plan.colls:
                    for position, mode in enumerate(pass_order(plan.modes, p, plan.order)):
                        count += 1
                        key = (p, launch, coll, mode.name)
                        if key in done:  # a resumed run keeps what an earlier one measured
                            continue
                        rec = _one_launch(plan, mode, coll, launch, p)
                        rec["position"] = position
                        records.append(rec)
                        sink.write(jsonout.dumps(rec) + "\n")
                        sink.flush()
                        if progress:
                            progress("launches", count, total)
    return records


@dataclass
class LaunchLines:
    """A launches.jsonl file read once: its text, the lines that hold a launch record with the records, and
    the non-blank lines that hold none (cut short by a killed run, malformed, or a JSON value without a
    launch's pass, launch, collective and mode)."""

    text: str
    kept: list[str]
    records: list[dict[str, Any]]
    unreadable: list[str]


def split_launches(path: Path) -> LaunchLines:
    """PATH's lines as launch records and lines that are none (an absent file: no lines)."""
    text = path.read_text(errors="replace") if path.is_file() else ""
    out = LaunchLines(text, [], [], [])
    for line in text.splitlines():
        if not line.strip():
            continue
        rec = _launch_record(line)
        if rec is None:
            out.unreadable.append(line)
        else:
            out.kept.append(line)
            out.records.append(rec)
    return out


def scan_launches(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The launch records of a launches.jsonl file and how many of its non-blank lines are not one
    (`split_launches`)."""
    lines = split_launches(path)
    return lines.records, len(lines.unreadable)


def unreadable_note(count: int, path: Path) -> str:
    """The sentence that says a summary left lines of launches.jsonl out."""
    left_out = "cut short or malformed; their launches are left out"
    return f"skipped {unreadable_lines(count)} in {path} ({left_out})"


def read_launches(outdir: Path) -> tuple[list[dict[str, Any]], int]:
    """The launches an earlier run recorded in OUTDIR/launches.jsonl and the number of lines that could not
    be read (a torn last line, a malformed one: `scan_launches`); where the traces are still in
    OUTDIR/traces, what was pinned and the agreement are read from them again. A file without a single
    launch record is an error: there is nothing to summarise."""
    path = outdir / "launches.jsonl"
    if not path.is_file():
        raise BenchError(f"{path} does not exist: nothing to summarise")
    records, unreadable = scan_launches(path)
    if not records:
        what = unreadable_lines(unreadable) if unreadable else "empty"
        raise BenchError(f"no launches in {path} ({what}): nothing to summarise")
    records = current_launches(records)
    for rec in records:
        prefix = outdir / "traces" / str(rec["mode"]) / f"p{rec['pass']}_{rec['coll']}_{rec['launch']}"
        files = trace_files(str(prefix))
        if files:
            _add_trace_checks(rec, read_records(files))
    return records, unreadable


def passes_in(records: Iterable[Mapping[str, Any]], baseline: str | None = None) -> int:
    """How many passes the records hold measurements of: launches of BASELINE that ran to the end (the
    passes the ratios can cover), of any mode where BASELINE is not given or never ran to the end; where
    none did, how many passes they hold at all."""
    recs = list(records)
    measured = {r.get("pass") for r in recs if r.get("rc") == 0}
    of_baseline = {r.get("pass") for r in recs if r.get("rc") == 0 and r.get("mode") == baseline}
    return len(of_baseline or measured or {r.get("pass") for r in recs})


def passes_text(count: int) -> str:
    return f"{count} interleaved {'pass' if count == 1 else 'passes'}"


_PASSES_TEXT = re.compile(r"\b\d+ interleaved pass(?:es)?\b")


def with_passes(header: str, count: int) -> str:
    """An earlier summary's header with its pass count replaced by the data's (a run stopped before its
    last pass, or a header written with another -p, says what the launches hold)."""
    return _PASSES_TEXT.sub(passes_text(count), header)


# What a launch measured under besides its pass, launch kind, collective and mode name, with the option
# that sets it: a resumed run whose launches differ in one of these would mix two measurements in one table.
# `order` places the modes in a pass (the by-place comparison reads where each ran), `trace` decides whether
# an autoccl mode's launch left traces (tasks.md and later analysis need them of every launch; tracing also
# costs the launch time). --timeout is no such setting: it only bounds a launch, and one that ran past it
# failed and is launched again.
_PLAN_SETTINGS = {
    "bin": "--bin",
    "gpus": "-g",
    "begin": "-b",
    "end": "-e",
    "factor": "-f",
    "warmup": "-w",
    "iters": "-n",
    "nt_args": "--nt-args",
    "mpirun": "--mpirun",
    "order": "--order",
    "trace": "--trace",
}
# Settings launch records keep since a later version: a record without one (written before) is not compared
# on it, so that such a folder still resumes.
_RECORDED_LATER = frozenset({"order", "trace"})


def launch_settings(plan: Plan, mode: Mode, launch: str) -> dict[str, Any]:
    """The settings a launch record keeps (`settings`): the plan's (mpirun for an mpi launch only, trace for
    an autoccl mode's only: plain NCCL is never traced) and the mode's `autoccl run` options and VAR=VALUE
    assignments as given (placeholders unexpanded)."""
    out: dict[str, Any] = {
        "bin": str(plan.bin_dir.resolve()),
        "gpus": plan.gpus,
        "begin": plan.begin,
        "end": plan.end,
        "factor": plan.factor,
        "warmup": plan.warmup,
        "iters": plan.iters,
        "nt_args": list(plan.extra_args),
        "order": plan.order,
        "run_args": None if mode.run_args is None else list(mode.run_args),
        "env": [list(kv) for kv in mode.env],
    }
    if launch == "mpi":
        out["mpirun"] = plan.mpirun
    if not mode.plain:
        out["trace"] = plan.trace
    return out


def check_resume(plan: Plan, records: Iterable[Mapping[str, Any]], path: Path) -> None:
    """A run into a folder whose launches.jsonl already holds finished launches resumes it only under the
    same settings (more passes, modes, collectives or launch kinds are fine): otherwise one sentence names
    what differs. Launches that failed are launched again, whatever their settings; launches of a mode not
    in this plan are compared on the plan's settings alone."""
    modes = {m.name: m for m in plan.modes}
    differ: dict[str, str] = {}
    for rec in records:
        if rec.get("rc") != 0:
            continue
        old = rec.get("settings")
        if not isinstance(old, dict):
            raise BenchError(
                f"{path} holds launches of an autoccl that did not record their settings, so this run cannot "
                "tell whether they compare: write to another folder (or summarise it with --report-only)"
            )
        mode = modes.get(str(rec["mode"]))
        new = launch_settings(plan, mode or Mode(str(rec["mode"]), None), str(rec["launch"]))
        for key, option in _PLAN_SETTINGS.items():
            if key in _RECORDED_LATER and key not in old:
                continue  # recorded before autoccl kept it
            if key in new and old.get(key) != new[key]:
                then = _shown(old[key]) if key in old else "unrecorded"
                differ.setdefault(option, f"{option} {then} then, {_shown(new[key])} now")
        if mode is not None:
            for key, what in (("run_args", "options"), ("env", "VAR=VALUE")):
                if old.get(key) != new[key]:
                    name = f"mode {mode.name}'s {what}"
                    differ.setdefault(name, f"{name} {_shown(old.get(key))} then, {_shown(new[key])} now")
    if differ:
        raise BenchError(
            f"{path} holds launches measured with other settings ({'; '.join(list(differ.values())[:4])}): "
            "run with the same options to resume them, or write to another folder"
        )


def _shown(value: Any) -> str:
    """A recorded setting as the command line gave it: options and VAR=VALUE pairs quoted, plain NCCL as
    such."""
    if value is None:
        return "plain"
    if isinstance(value, bool):  # --trace
        return "on" if value else "off"
    if isinstance(value, list):
        return repr(" ".join("=".join(map(str, x)) if isinstance(x, list) else str(x) for x in value))
    return str(value)


def current_launches(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records without the failed launches a later record of the same (pass, launch kind, collective,
    mode) superseded, as a run that resumed sees them: a failed launch that a later run launched again is not
    a failure of the folder any more (the resumed run no longer counts it; its summary must not either)."""
    later: set[tuple[Any, ...]] = set()
    kept: list[dict[str, Any]] = []
    for rec in reversed(records):
        key = (rec["pass"], rec["launch"], rec["coll"], rec["mode"])
        if rec.get("rc") == 0 or key not in later:
            kept.append(rec)
        later.add(key)
    return kept[::-1]


def _finished(records: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The launches of earlier records that ran to the end, by (pass, launch, collective, mode)."""
    done: dict[tuple[Any, ...], dict[str, Any]] = {}
    for rec in records:
        if rec.get("rc") == 0:
            done[(rec["pass"], rec["launch"], rec["coll"], rec["mode"])] = rec
    return done


UNREADABLE_SUFFIX = ".unreadable"


def set_aside_unreadable(path: Path, lines: LaunchLines) -> tuple[list[dict[str, Any]], int]:
    """Before a run resumes: the lines of PATH that are no launch record (a line cut short by a killed run, a
    malformed one) move to PATH.unreadable (appended: nothing is lost), PATH keeps its records and ends in a
    newline. The run then launches again whatever those lines held, and later summaries do not count them as
    left out. LINES is PATH as `split_launches` read it. Returns the records PATH keeps and how many lines
    moved."""
    text, kept, records, moved = lines.text, lines.kept, lines.records, lines.unreadable
    if not text:
        return [], 0
    if not moved and text.endswith("\n"):
        return records, 0
    if moved:
        with open(path.with_name(path.name + UNREADABLE_SUFFIX), "a") as aside:
            aside.write("".join(x + "\n" for x in moved))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(x + "\n" for x in kept))
    os.replace(tmp, path)
    return records, len(moved)


def _launch_record(line: str) -> dict[str, Any] | None:
    """The launch record a line of launches.jsonl holds, or None: cut short, malformed, or a JSON value
    without a launch's pass, launch, collective and mode."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError:
        return None
    if (
        isinstance(rec, dict)
        and isinstance(rec.get("pass"), int)
        and all(isinstance(rec.get(k), str) for k in ("launch", "coll", "mode"))
    ):
        return rec
    return None


def _one_launch(plan: Plan, mode: Mode, coll: str, launch: str, pass_no: int) -> dict[str, Any]:
    cmd = launch_command(plan, mode, coll, launch, pass_no)
    env = child_env(mode, os.environ)
    log = plan.out / "logs" / f"p{pass_no}_{launch}_{coll}_{mode.name}.log"
    if plan.trace and not mode.plain:
        trace_prefix(plan, mode, coll, launch, pass_no).parent.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(
        cmd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(timeout=plan.timeout)
        rc, out = proc.returncode, stdout + stderr
    except subprocess.TimeoutExpired:
        _kill_launch(proc)
        stdout, stderr = proc.communicate()
        rc = 124
        out = _text(stdout) + _text(stderr) + f"\nautoccl bench: killed after {plan.timeout:.0f} s\n"
    except BaseException:  # Ctrl-C, SIGTERM (as KeyboardInterrupt): the launch stops with the harness
        _kill_launch(proc)
        proc.wait()
        raise
    wall = time.monotonic() - t0
    log.write_text(" ".join(shlex.quote(c) for c in cmd) + "\n" + out)
    rows = parse_rows(out)
    rec: dict[str, Any] = {
        "pass": pass_no,
        "launch": launch,
        "coll": coll,
        "mode": mode.name,
        "rc": rc,
        "wall_s": round(wall, 2),
        "rows": rows,
        "data_errors": sum((r["oop_wrong"] or 0) + (r["ip_wrong"] or 0) for r in rows),
        "log": str(log.relative_to(plan.out)),
        "settings": launch_settings(plan, mode, launch),
    }
    if rc == 0 and not rows:
        rec["rc"] = -1
        rec["error"] = "no result rows in the output"
    elif rc != 0:
        rec["error"] = out.strip().splitlines()[-1][:300] if out.strip() else f"exit code {rc}"
    if not mode.plain:
        rec["no_tuner"] = no_tuner_warnings(out)
    if plan.trace and not mode.plain:
        prefix = trace_prefix(plan, mode, coll, launch, pass_no)
        _add_trace_checks(rec, read_records(trace_files(str(prefix))))
    return rec


def _kill_launch(proc: subprocess.Popen[str]) -> None:
    """Kills a launch's whole process group (it was started in a session of its own): the processes it
    started (mpirun's ranks, a shell's children) too, not its first process alone. Those would go on holding
    the GPUs beside the next launch, and the output pipes open until they ended."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def _add_trace_checks(rec: dict[str, Any], records: list[dict[str, Any]]) -> None:
    """What a launch's traces say: cross-rank agreement, what was pinned, what the coordinator's lookups cost
    (over TCP), and refusals to tune (added to those its output's WARN lines gave)."""
    rec["agreement"] = cross_rank_agreement(records)
    rec["pinned"] = pinned_tasks(records)
    coordinator = coordinator_stats(records)
    if coordinator:
        rec["coordinator"] = coordinator
    rec["no_tuner"] = sorted(set(rec.get("no_tuner", [])) | set(no_tuner_reasons(records)))


def _text(b: bytes | str | None) -> str:
    if b is None:
        return ""
    return b if isinstance(b, str) else b.decode(errors="replace")


# ------------------------------------------------------------------------------------------ statistics


def _quantile(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return math.nan
    pos = q * (len(s) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _median(xs: Sequence[float]) -> float:
    return _quantile(xs, 0.5)


def _geomean(xs: Sequence[float]) -> float:
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else math.nan


def bootstrap_interval(
    samples: Sequence[Sequence[float]], stat: Callable[[list[Sequence[float]]], float], n: int = 2000
) -> tuple[float, float]:
    """95 % interval of `stat` over samples (passes, launch pairs) resampled with replacement (seeded: reports
    are reproducible). Fewer than two samples give no interval (NaN, NaN): every resample of one pass is that
    pass, and an interval of zero width would claim a certainty one launch cannot give."""
    import numpy as np

    rng = np.random.default_rng(12345)
    k = len(samples)
    if k < 2:
        return math.nan, math.nan
    vals = []
    for _ in range(n):
        idx = rng.integers(0, k, size=k)
        vals.append(stat([samples[i] for i in idx]))
    return float(np.quantile(vals, 0.025)), float(np.quantile(vals, 0.975))


def _pass_geomean(by_cell: list[dict[str, float]]) -> Callable[[list[Sequence[float]]], float]:
    """The statistic the bootstrap draws passes for: each cell's median over the drawn passes it has, then
    the geometric mean over cells (a draw is a list of one-element pass ids)."""

    def stat(drawn: list[Sequence[float]]) -> float:
        picked = [str(int(d[0])) for d in drawn]
        meds = [_median([c[p] for p in picked if p in c]) for c in by_cell]
        return _geomean([x for x in meds if not math.isnan(x)])

    return stat


def summarize(
    records: Sequence[Mapping[str, Any]], baseline: str = "plain", min_bytes: int = 4 << 20
) -> dict[str, Any]:
    """Per (launch, collective, size) and mode: busbw per pass, the ratio to the baseline of the same pass
    (median, min, max, bootstrap 95 % interval), and the baseline's own spread across passes; per mode and
    launch: the geometric mean of the median ratios over cells >= min_bytes, the worst cell, data errors,
    failed launches and divergent calls.

    A cell below 0.98x is listed as a loss beyond the baseline's own spread when the mode lost more than the
    baseline moved between its passes on that cell (1 - ratio > max/min - 1 of the baseline; with one pass, no
    spread is known and every such cell is listed): at 1-2 MiB two launches of plain NCCL can differ by half,
    and a ratio inside that says nothing either way."""
    busbw: dict[tuple[str, str, int, str], dict[int, float]] = {}
    for rec in records:
        if rec.get("rc") != 0:
            continue
        for row in rec["rows"]:
            key = (rec["launch"], rec["coll"], int(row["bytes"]), rec["mode"])
            busbw.setdefault(key, {})[int(rec["pass"])] = float(row["oop_busbw_gbs"])
    outliers = _largest_average_over_median(records)
    place = {
        (int(r["pass"]), r["launch"], r["coll"], r["mode"]): int(r["position"])
        for r in records
        if r.get("rc") == 0 and isinstance(r.get("position"), int)
    }
    # every mode and launch kind launched, measured or not: one whose every launch failed keeps its row (its
    # failed launches), rather than leaving the table without a word
    modes = sorted({str(r["mode"]) for r in records}, key=lambda m: (m != baseline, m))
    launch_kinds = sorted({str(r["launch"]) for r in records})
    cells = sorted({(la, c, b) for (la, c, b, _) in busbw})
    out_cells = []
    for la, coll, b in cells:
        base = busbw.get((la, coll, b, baseline), {})
        base_vals = list(base.values())
        cell: dict[str, Any] = {
            "launch": la,
            "coll": coll,
            "bytes": b,
            "baseline_busbw": _median(base_vals) if base_vals else None,
            # plain vs plain: how far two launches of the baseline land apart (max/min - 1)
            "baseline_spread": (max(base_vals) / min(base_vals) - 1)
            if len(base_vals) > 1 and min(base_vals) > 0
            else None,
            "modes": {},
        }
        for m in modes:
            if m == baseline:
                continue
            vals = busbw.get((la, coll, b, m), {})
            by_pass = {p: vals[p] / base[p] for p in sorted(vals) if p in base and base[p] > 0}
            ratios = list(by_pass.values())
            if not ratios:
                continue
            lo, hi = bootstrap_interval([[r] for r in ratios], lambda s: _median([x[0] for x in s]))
            cell["modes"][m] = {
                "busbw": _median(list(vals.values())),
                "ratios": [round(r, 4) for r in ratios],
                "ratio_by_pass": {str(p): round(r, 4) for p, r in by_pass.items()},
                "ratio": _median(ratios),
                "ratio_min": min(ratios),
                "ratio_max": max(ratios),
                "ci95": [lo, hi],
            }
        out_cells.append(cell)
    overall: dict[str, Any] = {}
    for m in modes:
        if m == baseline:
            continue
        for la in launch_kinds:
            sel = [c for c in out_cells if c["launch"] == la and m in c["modes"]]
            big = [c for c in sel if c["bytes"] >= min_bytes]
            geo = _geomean([c["modes"][m]["ratio"] for c in big]) if big else math.nan
            # The interval resamples whole passes (a pass's launches share the machine's state): per resample,
            # each cell's median over the passes drawn that it has, then the geometric mean over cells.
            pass_ids = sorted({p for c in big for p in c["modes"][m]["ratio_by_pass"]})

            by_cell = [c["modes"][m]["ratio_by_pass"] for c in big]
            geo_of = _pass_geomean(by_cell)
            lo, hi = (math.nan, math.nan)
            if pass_ids:
                lo, hi = bootstrap_interval([[float(p)] for p in pass_ids], geo_of)
            worst = min(sel, key=lambda c: c["modes"][m]["ratio"]) if sel else None
            mrecs = [r for r in records if r["mode"] == m and r["launch"] == la]
            if not mrecs:
                continue
            overall[f"{m}/{la}"] = {
                "mode": m,
                "launch": la,
                "cells": len(sel),
                # NaN here, null in summary.json (strict JSON), with the reason beside it
                "geomean_ge_min_bytes": geo,
                "geomean_ci95": [lo, hi],
                **(
                    {}
                    if math.isfinite(geo)
                    else {"geomean_null_reason": _no_geomean(big, min_bytes, measured=bool(sel))}
                ),
                # per pass, the geometric mean over the cells it has: pass 0 is a tuned mode's cold start
                "geomean_by_pass": {
                    str(p): _geomean([c[str(p)] for c in by_cell if str(p) in c])
                    for p in sorted(map(int, pass_ids))
                },
                "min_bytes": min_bytes,
                "worst_cell": None
                if worst is None
                else {"coll": worst["coll"], "bytes": worst["bytes"], "ratio": worst["modes"][m]["ratio"]},
                "cells_below_0.98": sum(1 for c in sel if c["modes"][m]["ratio"] < 0.98),
                "losses_beyond_spread": [
                    {
                        "coll": c["coll"],
                        "bytes": c["bytes"],
                        "ratio": c["modes"][m]["ratio"],
                        "baseline_spread": c["baseline_spread"],
                    }
                    for c in sel
                    if beyond_spread(c["modes"][m]["ratio"], c["baseline_spread"])
                ],
                "largest_average_over_median": outliers.get((m, la)),
                "data_errors": sum(int(r.get("data_errors", 0)) for r in mrecs),
                "failed_launches": sum(1 for r in mrecs if r.get("rc") != 0),
                "divergent_calls": sum(int(r.get("agreement", {}).get("divergent_calls", 0)) for r in mrecs),
                "calls_compared": sum(int(r.get("agreement", {}).get("calls_compared", 0)) for r in mrecs),
                "launches_without_tuner": sum(1 for r in mrecs if r.get("no_tuner")),
                "launches": len(mrecs),
                "no_tuner": sorted({w for r in mrecs for w in r.get("no_tuner", [])}),
                "by_place": _by_place(big, m, la, baseline, place),
            }
    base_spreads = [c["baseline_spread"] for c in out_cells if c["baseline_spread"] is not None]
    base_recs = [r for r in records if r["mode"] == baseline]
    return {
        "baseline": baseline,
        # launches whose output held several rows of one size (--nt-args '-d all', '-o all', '-N 2'): the
        # cells compare the last row of each size
        "launches_with_several_rows_per_size": sum(
            1 for r in records if r.get("rc") == 0 and _several_rows_per_size(r["rows"])
        ),
        "baseline_launches": len(base_recs),
        "baseline_failed_launches": sum(1 for r in base_recs if r.get("rc") != 0),
        "cells": out_cells,
        "overall": overall,
        "baseline_spread_median": _median(base_spreads) if base_spreads else None,
        "baseline_spread_max": max(base_spreads) if base_spreads else None,
        "baseline_largest_average_over_median": {
            la: v for (m, la), v in sorted(outliers.items()) if m == baseline
        },
    }


def _several_rows_per_size(rows: Sequence[Mapping[str, Any]]) -> bool:
    sizes = [int(r["bytes"]) for r in rows]
    return len(set(sizes)) != len(sizes)


def _no_geomean(big: Sequence[Mapping[str, Any]], min_bytes: int, measured: bool = True) -> str:
    """Why a mode has no geometric mean over the cells >= MIN_BYTES (the words summary.md shows); MEASURED
    is false where no launch of the mode ran to the end beside the baseline's."""
    if not measured:
        return "no launch measured beside the baseline"
    if not big:
        return f"no cell ≥ {_mib(min_bytes)}"
    return f"no cell ≥ {_mib(min_bytes)} with a ratio above 0"


def _by_place(
    cells: Sequence[Mapping[str, Any]],
    mode: str,
    launch: str,
    baseline: str,
    place: Mapping[tuple[int, str, str, str], int],
) -> dict[str, Any]:
    """The mode's geometric mean over cells (each cell's median over the passes in the group) apart for the
    passes where it was launched before the baseline on that collective and those where it came after: with
    the order rotating, a large difference says the machine, not the mode, moved over the pass. Pass 0 is left
    out: it is a tuned mode's cold pass, and the baseline, listed first, leads it under any order."""
    groups: dict[str, tuple[list[float], set[int]]] = {"before": ([], set()), "after": ([], set())}
    for c in cells:
        split: dict[str, list[float]] = {"before": [], "after": []}
        for p_text, ratio in c["modes"][mode]["ratio_by_pass"].items():
            p = int(p_text)
            if p == 0:
                continue
            own, base = place.get((p, launch, c["coll"], mode)), place.get((p, launch, c["coll"], baseline))
            if own is None or base is None:
                continue  # launched before positions were recorded
            side = "before" if own < base else "after"
            split[side].append(ratio)
            groups[side][1].add(p)
        for side, ratios in split.items():
            if ratios:
                groups[side][0].append(_median(ratios))
    return {
        side: {"geomean": _geomean(meds), "passes": sorted(passes), "cells": len(meds)}
        for side, (meds, passes) in groups.items()
        if meds
    }


def _largest_average_over_median(
    records: Sequence[Mapping[str, Any]],
) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (mode, launch): the one nccl-tests average (time per call, out-of-place or in-place) furthest above
    the median of the same cell's averages over passes, as max/median. A stall inside one launch's n calls
    shows here even when the median ratio hides it (the bar: no average above 1.5x its median)."""
    times: dict[tuple[str, str, str, int, str], list[float]] = {}
    for rec in records:
        if rec.get("rc") != 0:
            continue
        for row in rec["rows"]:
            for place in ("oop", "ip"):
                us = row.get(f"{place}_time_us")
                if us is not None and float(us) > 0:
                    key = (rec["mode"], rec["launch"], rec["coll"], int(row["bytes"]), place)
                    times.setdefault(key, []).append(float(us))
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for (mode, launch, coll, b, place), xs in times.items():
        if len(xs) < 2:
            continue
        factor = max(xs) / _median(xs)
        best = out.get((mode, launch))
        if best is None or factor > best["factor"]:
            out[(mode, launch)] = {"factor": factor, "coll": coll, "bytes": b, "placement": place}
    return out


def beyond_spread(ratio: float, spread: float | None, below: float = 0.98) -> bool:
    """A ratio below `below` whose loss is larger than the baseline's own movement (max/min - 1 between its
    launches; None, one launch: unknown, so any such loss counts)."""
    return ratio < below and (spread is None or 1.0 - ratio > spread)


def task_table(records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any]) -> str:
    """Where the time goes, per traced launch and size (mode online): the calls the tuner spent before its
    configuration stopped changing, what it pinned against NCCL's choice, the kernel times it measured of
    both, and what the caller saw (this launch's busbw over plain NCCL's of the same pass)."""
    ratio: dict[tuple[Any, ...], float] = {}
    base: dict[tuple[Any, ...], float] = {}
    for r in records:
        if r.get("rc") != 0:
            continue
        for row in r["rows"]:
            key = (r["pass"], r["launch"], r["coll"], int(row["bytes"]))
            if r["mode"] == summary["baseline"]:
                base[key] = float(row["oop_busbw_gbs"])
            else:
                mode_key = (*key, r["mode"])
                ratio[mode_key] = float(row["oop_busbw_gbs"])
    lines = [
        "| pass | launch | collective | size | mode | pinned | NCCL's choice | last call ran "
        "| converged at call | kernel µs NCCL → pinned | NCCL's model µs | kernel gain | small task "
        "| caller's busbw / plain |",
        "| ---: | --- | --- | ---: | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in sorted(records, key=lambda x: (x["pass"], x["launch"], x["coll"], x["mode"])):
        for t in sorted(r.get("pinned", []), key=lambda t: int(t.get("bytes", 0))):
            cell = (r["pass"], r["launch"], r["coll"], int(t["bytes"]))
            b = base.get(cell)
            mode_cell = (*cell, r["mode"])
            got = ratio.get(mode_cell)
            seen = f"{got / b:.3f}" if got and b else "—"
            pinned = (
                f"{t.get('algo')}/{t.get('proto')}/{t.get('channels')}" if t.get("algo") else "NCCL's choice"
            )
            if t.get("ran_algo") is None:
                # a plugin before the record's `ran_*` fields: its `nccl_*` was the last call's kernel (a
                # pin's, for a pinned task), never known to be NCCL's own choice
                nccl, ran = "—", _kernel_config(t, "nccl")
            else:
                nccl, ran = _kernel_config(t, "nccl"), _kernel_config(t, "ran")
            conv = t.get("converged_at")
            conv_text = str(conv) if conv is not None else "—"
            d, bu = t.get("default_us") or 0.0, t.get("best_us") or 0.0
            kern = f"{d:.1f} → {bu:.1f}" if d and bu else "—"
            gain = f"{100 * float(t.get('gain') or 0):+.1f} %"
            # The model's estimate beside the measured kernel: the margin a verdict from the model relies on.
            model = t.get("model_us")
            model_text = f"{float(model):.1f}" if model is not None and float(model) >= 0 else "—"
            small = ""
            if t.get("small_task"):
                small = "by NCCL's model" if t.get("small_by_model") else "by samples"
            lines.append(
                f"| {r['pass']} | {r['launch']} | {r['coll']} | {_mib(int(t['bytes']))} | {r['mode']} "
                f"| {pinned} | {nccl} | {ran} | {conv_text} | {kern} | {model_text} | {gain} | {small} "
                f"| {seen} |"
            )
    return "\n".join(lines) + "\n"


def _kernel_config(task: dict[str, Any], prefix: str) -> str:
    """A task record's `nccl_*` (NCCL's own choice, from the calls left to it) or `ran_*` (the last measured
    call's kernel) as algo/proto/channels; "—" where no such call was measured."""
    algo, proto = str(task.get(f"{prefix}_algo") or "unknown"), str(task.get(f"{prefix}_proto") or "unknown")
    if algo == "unknown" or proto == "unknown":
        return "—"
    return f"{algo.lower()}/{proto.lower()}/{task.get(f'{prefix}_channels')}"


def _mib(b: int) -> str:
    return f"{b >> 20} MiB" if b >= 1 << 20 else f"{b >> 10} KiB"


def _outlier_text(o: Mapping[str, Any] | None) -> str:
    if not o:
        return "—"
    place = "out-of-place" if o["placement"] == "oop" else "in-place"
    return f"{o['factor']:.2f}× ({o['coll']} {_mib(int(o['bytes']))} {place})"


def markdown(summary: Mapping[str, Any], header: str = "") -> str:
    """The summary as markdown: one row per mode and launch, then every cell."""
    lines = [header] if header else []
    skipped = int(summary.get("unreadable_lines") or 0)
    if skipped:
        lines += [
            f"**{unreadable_lines(skipped)} of launches.jsonl skipped** (cut "
            "short or malformed): their launches are not in these tables.",
            "",
        ]
    lines += [
        "| mode | launch | geomean ≥ 4 MiB (95 % CI) | worst cell | cells < 0.98× | of them beyond "
        + f"{summary['baseline']}'s spread | data errors | failed launches | divergent calls "
        "| largest average / its median |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for o in summary["overall"].values():
        w = o["worst_cell"]
        worst = f"{w['coll']} {_mib(w['bytes'])} {w['ratio']:.3f}×" if w else "—"
        ci, geo = o["geomean_ci95"], o["geomean_ge_min_bytes"]
        # no cell at or above min_bytes (small sizes only, or none measured): nothing to average
        why = o.get("geomean_null_reason") or f"no cell ≥ {_mib(int(o.get('min_bytes') or 4 << 20))}"
        interval = f"{ci[0]:.3f}–{ci[1]:.3f}" if all(map(jsonout.finite_number, ci)) else "no interval"
        geo_text = f"{geo:.3f}× ({interval})" if jsonout.finite_number(geo) else f"— ({why})"
        lines.append(
            f"| {o['mode']} | {o['launch']} | {geo_text} "
            f"| {worst} | "
            f"{o['cells_below_0.98']} of {o['cells']} | {len(o.get('losses_beyond_spread', []))} | "
            f"{o['data_errors']} | {o['failed_launches']} | "
            f"{o['divergent_calls']} of {o['calls_compared']} | "
            f"{_outlier_text(o.get('largest_average_over_median'))} |"
        )
    several = int(summary.get("launches_with_several_rows_per_size") or 0)
    if several:
        lines += [
            "",
            f"**{several} launches printed several rows of one size** (--nt-args `-d all`, `-o all` or "
            "`-N`): each cell compares the last row of its size; the data errors count every row.",
        ]
    base_failed = int(summary.get("baseline_failed_launches") or 0)
    if base_failed:
        lines += [
            "",
            f"**{summary['baseline']} (the baseline): {base_failed} of {summary.get('baseline_launches')} "
            "launches failed**; a cell without the baseline's launch has no ratio.",
        ]
    by_pass = [o for o in summary["overall"].values() if len(o.get("geomean_by_pass") or {}) > 1]
    if by_pass:
        lines += [
            "",
            "Geomean by pass (pass 0: a tuned mode's cold start; later passes start from its table):",
            "",
        ]
        for o in by_pass:
            values = o["geomean_by_pass"].values()
            per = " / ".join(f"{v:.3f}" if jsonout.finite_number(v) else "—" for v in values)
            lines.append(f"- {o['mode']}, {o['launch']}: {per}")
    refused = [o for o in summary["overall"].values() if o.get("launches_without_tuner")]
    if refused:
        lines += [
            "",
            "**The tuner did not engage** (these launches measured the plugin loaded, not its tuning):",
            "",
        ]
        for o in refused:
            lines.append(
                f"- {o['mode']}, {o['launch']}: {o['launches_without_tuner']} of {o['launches']} launches; "
                + "; ".join(o["no_tuner"])
            )
    sp_med, sp_max = summary.get("baseline_spread_median"), summary.get("baseline_spread_max")
    if sp_med is not None and sp_max is not None:
        lines += [
            "",
            f"{summary['baseline']} vs {summary['baseline']} (max/min − 1 over passes, per cell): median "
            f"{100 * sp_med:.1f} %, largest {100 * sp_max:.1f} %.",
        ]
    placed = [o for o in summary["overall"].values() if len(o.get("by_place") or {}) == 2]
    if placed:
        lines += [
            "",
            f"By place in the pass (geomean ≥ {_mib(placed[0]['min_bytes'])}, launched before / after "
            f"{summary['baseline']} on the collective; the passes after the first, the cold one):",
        ]
        lines += [""]
        for o in placed:
            b, a = o["by_place"]["before"], o["by_place"]["after"]
            lines.append(
                f"- {o['mode']}, {o['launch']}: before {b['geomean']:.3f}× (passes "
                f"{', '.join(map(str, b['passes']))}), after {a['geomean']:.3f}× (passes "
                f"{', '.join(map(str, a['passes']))})"
            )
    base_out = summary.get("baseline_largest_average_over_median") or {}
    if base_out:
        lines += [
            "",
            f"{summary['baseline']}'s own largest average over its median: "
            + "; ".join(f"{la} {_outlier_text(v)}" for la, v in base_out.items())
            + ".",
        ]
    beyond = [(o, x) for o in summary["overall"].values() for x in o.get("losses_beyond_spread", [])]
    if beyond:
        lines += [
            "",
            f"Cells below 0.98× by more than {summary['baseline']} moved between its passes on the same "
            "cell:",
            "",
        ]
        for o, x in beyond:
            spread = x["baseline_spread"]
            moved = f"{100 * spread:.1f} %" if spread is not None else "unknown (1 pass)"
            lines.append(
                f"- {o['mode']}, {o['launch']}: {x['coll']} {_mib(x['bytes'])} {x['ratio']:.3f}× "
                f"({summary['baseline']} moved {moved})"
            )
    modes = list(dict.fromkeys(m for c in summary["cells"] for m in c["modes"]))
    head = ["launch", "collective", "size", f"{summary['baseline']} busbw GB/s", "spread"]
    head += [f"{m} ratio [min–max]" for m in modes]
    lines += [
        "",
        "| " + " | ".join(head) + " |",
        "| --- | --- | ---: | ---: | ---: |" + "".join(" ---: |" for _ in modes),
    ]
    for c in summary["cells"]:
        vals = []
        for m in modes:
            r = c["modes"].get(m)
            vals.append(f"{r['ratio']:.3f} [{r['ratio_min']:.2f}–{r['ratio_max']:.2f}]" if r else "—")
        base = f"{c['baseline_busbw']:.1f}" if c["baseline_busbw"] is not None else "—"
        spread = f"{100 * c['baseline_spread']:.1f} %" if c["baseline_spread"] is not None else "—"
        lines.append(
            "| " + " | ".join([c["launch"], c["coll"], _mib(c["bytes"]), base, spread, *vals]) + " |"
        )
    return "\n".join(lines) + "\n"


def plot(summary: Mapping[str, Any], path: Path) -> Path | None:
    """Ratio to the baseline per size, a row of panels per launch kind and a column per collective: the
    median with its min–max over passes, and the baseline's own spread (max/min - 1) as a grey band around 1
    (the axis is cut at 0.3 and 1.5)."""
    cells = summary["cells"]
    if not cells:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    launches = sorted({c["launch"] for c in cells})
    colls = sorted({c["coll"] for c in cells})
    modes = list(dict.fromkeys(m for c in cells for m in c["modes"]))
    fig, axes = plt.subplots(
        len(launches), len(colls), figsize=(3.6 * len(colls), 2.8 * len(launches)), squeeze=False, sharey=True
    )
    for row, la in enumerate(launches):
        for col, coll in enumerate(colls):
            ax = axes[row][col]
            sel = sorted(
                (c for c in cells if c["launch"] == la and c["coll"] == coll), key=lambda c: c["bytes"]
            )
            xs = [c["bytes"] for c in sel]
            spread = [min(c["baseline_spread"] or 0.0, 1.0) for c in sel]
            band = [1 - s for s in spread], [1 + s for s in spread]
            ax.fill_between(xs, *band, color="0.88", label="plain vs plain")
            ax.axhline(1.0, color="0.4", lw=0.8)
            ax.axhline(0.98, color="tab:red", lw=0.6, ls=":")
            for m in modes:
                pts = [(c["bytes"], c["modes"][m]) for c in sel if m in c["modes"]]
                if not pts:
                    continue
                x = [p[0] for p in pts]
                y = [p[1]["ratio"] for p in pts]
                lo = [p[1]["ratio"] - p[1]["ratio_min"] for p in pts]
                hi = [p[1]["ratio_max"] - p[1]["ratio"] for p in pts]
                ax.errorbar(x, y, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=m)
            ax.set_xscale("log", base=2)
            ax.set_ylim(0.3, 1.5)
            ax.set_title(f"{coll} ({la})", fontsize=9)
            if row == len(launches) - 1:
                ax.set_xlabel("bytes")
        axes[row][0].set_ylabel(f"busbw / {summary['baseline']}")
    axes[0][-1].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
