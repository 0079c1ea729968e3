"""`autoccl bench coll|train|train-pairs|nccl-tests` and `autoccl report` (torch and matplotlib are imported
lazily)."""

from __future__ import annotations

import contextlib
import datetime
import importlib.util
import signal
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import click

from autoccl import jsonout, settings
from autoccl.bench.modes import TUNED_TRAIN_MODES
from autoccl.bench.spec import SpecError
from autoccl.cli import options as O
from autoccl.cli.channels import communicator_channels
from autoccl.cli.files import refuse_unwritable

DEFAULT_COLLS = "all_gather,reduce_scatter,all_reduce"


DEFAULT_OUTPUT_DIR = "autoccl-bench"


def _fail(msg: str) -> click.ClickException:
    return click.ClickException(msg)


def _torch_gpus() -> int:
    try:
        import torch
    except ImportError:
        raise _fail(
            "autoccl bench needs PyTorch: `pip install 'autoccl[bench]'` "
            "(from a clone: `pip install '.[bench]'`; or torch>=2.4). Without a GPU, install the CPU "
            "build first (`pip install torch --index-url https://download.pytorch.org/whl/cpu`): the "
            "default one brings CUDA's libraries, gigabytes of them"
        ) from None
    return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0


def _have_torch() -> bool:
    try:
        return importlib.util.find_spec("torch") is not None
    except (ImportError, ValueError):  # a `torch` module that is no package (or None in sys.modules)
        return False


def _resolve_device(
    device: str, backend: str | None, nproc: int | None, distributed: bool
) -> tuple[str, int | None]:
    backend = backend or ("nccl" if device == "cuda" else "gloo")
    if device == "cpu" and backend == "nccl":
        raise _fail("--backend nccl needs --device cuda; use --backend gloo on the CPU")
    gpus = _torch_gpus()
    if device == "cuda":
        if gpus == 0:
            raise _fail("no CUDA GPUs visible; for a CPU run use --device cpu --backend gloo")
        if not distributed:
            nproc = nproc or gpus
            if nproc > gpus:
                raise _fail(f"--nproc {nproc} exceeds the {gpus} visible GPUs (one process per GPU)")
    elif not distributed:
        nproc = nproc or 2
    return backend, nproc


class Terminated(KeyboardInterrupt):
    """SIGTERM, delivered as KeyboardInterrupt so that the same clean-up runs as for Ctrl-C."""


@contextmanager
def _stoppable() -> Iterator[None]:
    """SIGTERM interrupts the run like Ctrl-C: the launch under way is stopped (its workers terminated)
    and the results measured so far are written."""

    def on_term(signum: int, frame: Any) -> None:
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


_RESUME_OR_FORCE = "--resume continues the run of -o PREFIX and --force replaces it: give one of them"


def _resume_doc(prefix: Path | None, resume: bool, kind: str, force: bool = False) -> dict[str, Any] | None:
    from autoccl.bench.results import ResultError, load_doc

    if not resume:
        return None
    if force:
        raise _fail(_RESUME_OR_FORCE)
    if prefix is None:
        raise _fail("--resume needs -o PREFIX (the prefix of the run to continue)")
    path = prefix.with_name(prefix.name + ".json")
    if not path.is_file():
        raise _fail(f"--resume: {path} does not exist (nothing to continue)")
    try:
        doc = load_doc(path)
    except ResultError as e:
        raise _fail(f"--resume: {e}") from None
    if doc.get("kind") != kind:
        raise _fail(f"--resume: {path} is a bench {doc.get('kind')} result, not {kind}")
    return doc


def _checkpointer(prefix: Path, main: bool) -> Callable[[dict[str, Any]], None] | None:
    """Writes PREFIX.json/.csv/.md after every launch (status "partial"): an interrupted or killed run
    keeps what it measured."""
    from autoccl.bench import results as R

    if not main:
        return None

    def write(doc: dict[str, Any]) -> None:
        R.write_outputs(doc, prefix)

    return write


def _default_prefix(kind: str) -> Path:
    """Without -o: a folder of runs in the current one (not a clone's benchmarks/results/, whose folders are
    the project's curated evidence)."""
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path(DEFAULT_OUTPUT_DIR) / f"{kind}-{stamp}"


@contextmanager
def _progress(enabled: bool) -> Iterator[Callable[[str, int, int], None] | None]:
    if not enabled:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        transient=False,
    ) as bar:
        tasks: dict[str, Any] = {}

        def update(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)

        yield update


@click.group()
def bench() -> None:
    """Benchmarks: `coll` (collectives), `nccl-tests` (NVIDIA's, plain and tuned interleaved), `train` (a
    training step) and `train-pairs` (interleaved launch pairs of `train`, summarised)."""


_ONLINE = "online modes: "
_channel_ceiling = O.channel_ceiling(_ONLINE)
_nccl_channels = O.nccl_channels(_ONLINE)


def _online_channels(
    modes: Any, ceiling: int | None, nccl_channels: int | str | None, backend: str
) -> tuple[int | None, int | None]:
    """(channel ceiling, cap on NCCL's own calls) of the online and manual modes' communicators, as
    `autoccl run` makes them (channels.communicator_channels); the same whichever other modes are listed.
    On gloo no NCCL communicator is made and the plugin is never loaded: the channels given are kept (they
    are recorded), and online mode's default, which asks NCCL, is not looked for."""
    online = any(getattr(m, "kind", "") in TUNED_TRAIN_MODES for m in modes)
    if backend == "gloo" and ceiling is None:
        return None, nccl_channels if isinstance(nccl_channels, int) else None
    return communicator_channels(online, ceiling, nccl_channels, None)


def _backend_of(launch: Launch) -> str:
    return launch.backend or ("nccl" if launch.device == "cuda" else "gloo")


def _refuse_overwrite(prefixes: Iterable[Path], launch: Launch) -> None:
    """-o PREFIX of an earlier run is refused, naming its file, unless --force replaces it or --resume
    continues it."""
    if launch.force and launch.resume:
        raise _fail(_RESUME_OR_FORCE)
    if launch.force or launch.resume:
        return
    for prefix in prefixes:
        for ext in (".json", ".csv", ".md"):
            path = prefix.with_name(prefix.name + ext)
            if path.exists():
                raise _fail(
                    f"{path} exists (an earlier run's result): choose another -o, continue it with --resume, "
                    "or pass --force to replace it"
                )


@dataclass(frozen=True)
class Launch:
    """How `bench coll` and `bench train` launch their workers and keep their results."""

    device: str
    backend: str | None
    nproc: int | None
    output: Path | None
    timeout: float
    seed: int
    progress: bool | None
    resume: bool
    force: bool


_launch = O.gathered(
    "launch",
    Launch,
    O.choice("--device", values=["cuda", "cpu"], default="cuda"),
    click.option(
        "--backend",
        type=click.Choice(["nccl", "gloo"]),
        default=None,
        help="torch.distributed backend [default: nccl on cuda, gloo on cpu]",
    ),
    click.option(
        "--nproc",
        type=click.IntRange(1, 4096),
        default=None,
        help="processes per launch [default: every visible GPU; 2 on cpu]; ignored under torchrun/srun",
    ),
    click.option(
        "-o",
        "--output",
        "output",
        type=click.Path(path_type=Path),
        default=None,
        help="output prefix: writes PREFIX.json, PREFIX.csv, PREFIX.md (logs in PREFIX.logs/) [default: "
        f"{DEFAULT_OUTPUT_DIR}/KIND-YYYYmmdd-HHMMSS in the current folder]",
    ),
    click.option(
        "--timeout",
        type=click.FloatRange(1.0, 7 * 24 * 3600.0),
        default=600.0,
        show_default=True,
        help="seconds per launch",
    ),
    click.option("--seed", type=click.IntRange(0, 2**31 - 1), default=1234, show_default=True),
    O.progress,
    click.option(
        "--resume",
        is_flag=True,
        help="continue the run of -o PREFIX: its finished launches are kept, the others run (same options)",
    ),
    click.option(
        "--force",
        is_flag=True,
        help="replace the result files of an earlier run at -o PREFIX (refused without it)",
    ),
)


@bench.command("coll")
@click.option(
    "--colls",
    "-c",
    default=DEFAULT_COLLS,
    show_default=True,
    help="all_gather, reduce_scatter, all_reduce, broadcast, reduce, all_to_all (or all)",
)
@click.option(
    "--sizes",
    "-s",
    default="1M:1G:x2",
    show_default=True,
    help="sizes and ranges: 1M,4M or 1M:1G:x2 or 1M:8M:+1M (binary units; see docs/bench.md for "
    "which buffer the size is)",
)
@click.option("--dtype", "-d", default="bf16", show_default=True)
@click.option(
    "--modes",
    "-m",
    multiple=True,
    default=["nccl"],
    show_default=True,
    help="nccl, static:VAR=VAL[,VAR=VAL], static-best, online, oracle (comma-separated, repeatable)",
)
@click.option(
    "--load",
    "loads",
    default="none",
    show_default=True,
    help="none, light, heavy, gemm:MxKxN[:dtype] (comma-separated)",
)
@click.option("--warmup", "-w", type=int, default=5, show_default=True)
@click.option("--iters", "-n", type=int, default=20, show_default=True, help="iterations per repetition")
@click.option("--reps", "-r", type=int, default=5, show_default=True, help="repetitions (median and spread)")
@click.option("--check", is_flag=True, help="verify results against a reference computed differently")
@click.option(
    "--online-warmup",
    type=int,
    default=200,
    show_default=True,
    help="extra warm-up iterations per cell in online mode (the tuning phase, traced)",
)
@_channel_ceiling
@_nccl_channels
@click.option(
    "--sweep-load", "sweep_loads", default=None, help="loads of the static-best sweep [default: --load]"
)
@click.option("--sweep-iters", type=int, default=None, help="iterations in sweep launches [default: --iters]")
@click.option("--sweep-reps", type=int, default=None, help="repetitions in sweep launches [default: --reps]")
@click.option("--static-space", default=None, help="static-best knobs: 'NCCL_PROTO=LL,LL128;CTAS=16,32;...'")
@O.choice(
    "--static-search", values=["oat", "grid"], default="oat", help="one knob at a time, or every combination"
)
@click.option(
    "--static-best-from",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="take the static-best setting from an earlier result's sweep (only re-measure it)",
)
@click.option(
    "--oracle-channels", default=None, help="channel counts of the oracle (auto = NCCL's) [auto,8,16,32,64]"
)
@click.option("--oracle-protos", default="ll,ll128,simple", show_default=True)
@click.option("--oracle-algos", default=None, help="restrict oracle algorithms (ring,tree)")
@click.option(
    "--oracle-remeasure/--no-oracle-remeasure",
    default=True,
    show_default=True,
    help="after the oracle's sweep, run each cell's pick again in one fresh launch per load (the sweep's "
    "best of many launches is biased upwards); the summary then takes the re-measurement",
)
@click.option(
    "--gemm-reps-from",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="GEMM work per loaded cell from an earlier result, so makespans compare across files",
)
@click.option("--dry-run", is_flag=True, help="print the launches and an estimated duration, run nothing")
@click.option("--est-busbw", type=float, default=None, help="GB/s assumed by the estimate [200 cuda, 1 cpu]")
@click.option(
    "--est-startup", type=float, default=None, help="seconds a launch takes to start [20 cuda, 5 cpu]"
)
@_launch
def coll(
    colls: str,
    sizes: str,
    dtype: str,
    modes: tuple[str, ...],
    loads: str,
    warmup: int,
    iters: int,
    reps: int,
    check: bool,
    online_warmup: int,
    channel_ceiling: int | None,
    nccl_channels: int | str | None,
    sweep_loads: str | None,
    sweep_iters: int | None,
    sweep_reps: int | None,
    static_space: str | None,
    static_search: str,
    static_best_from: str | None,
    oracle_channels: str | None,
    oracle_protos: str,
    oracle_algos: str | None,
    oracle_remeasure: bool,
    gemm_reps_from: str | None,
    dry_run: bool,
    est_busbw: float | None,
    est_startup: float | None,
    launch: Launch,
) -> None:
    """Collective bandwidth per mode (busbw/algbw as nccl-tests), optionally beside a GEMM load."""
    from autoccl.bench import modes as M
    from autoccl.bench import runner
    from autoccl.bench import spec as S
    from autoccl.bench.launch import LaunchError, detect_topology
    from autoccl.bench.results import ResultError

    for name, v in (("--warmup", warmup), ("--online-warmup", online_warmup)):
        if v < 0:
            raise _fail(f"{name} must be >= 0")
    for name, v in (
        ("--iters", iters),
        ("--reps", reps),
        ("--sweep-iters", sweep_iters or 1),
        ("--sweep-reps", sweep_reps or 1),
    ):
        if v < 1:
            raise _fail(f"{name} must be >= 1")
    try:
        ceiling, capped = _online_channels(
            M.parse_modes(modes), channel_ceiling, nccl_channels, _backend_of(launch)
        )
        o = runner.CollOptions(
            colls=S.parse_collectives(colls),
            sizes=S.parse_sizes(sizes),
            dtype=S.parse_dtype(dtype),
            loads=S.parse_loads(loads),
            modes=M.parse_modes(modes),
            device=launch.device,
            backend=launch.backend or "",
            warmup=warmup,
            iters=iters,
            reps=reps,
            check=check,
            online_warmup=online_warmup,
            online_channel_ceiling=ceiling,
            online_nccl_channels=capped,
            sweep_loads=S.parse_loads(sweep_loads) if sweep_loads else None,
            sweep_iters=sweep_iters,
            sweep_reps=sweep_reps,
            static_space=static_space or M.DEFAULT_STATIC_SPACE,
            static_search=static_search,
            static_best_from=static_best_from,
            oracle_channels=oracle_channels or M.DEFAULT_ORACLE_CHANNELS,
            oracle_protos=oracle_protos,
            oracle_algos=oracle_algos,
            oracle_remeasure=oracle_remeasure,
            gemm_reps_from=gemm_reps_from,
            timeout_s=launch.timeout,
            seed=launch.seed,
        )
        M.parse_static_space(o.static_space)
        M.parse_channels(o.oracle_channels)
        if launch.device == "cpu" and any(m.needs_plugin for m in o.modes):
            click.echo(
                "note: online/oracle on the CPU backend run the plugin environment, but gloo never "
                "loads NCCL; their numbers are plain gloo",
                err=True,
            )
        prefix = launch.output or _default_prefix("coll")
        refuse_unwritable(str(prefix), folders_made=True)  # missing folders are made when written
        workdir = prefix.with_name(prefix.name + ".logs")
        if dry_run:
            topo = detect_topology(launch.nproc or 1)
            # a plan needs no PyTorch (the harness's workers do): without it, the GPUs are not counted
            counted = launch.device == "cuda" and not launch.nproc and _have_torch()
            gpus = _torch_gpus() if counted else 0
            world = (
                topo.world_size
                if topo.distributed
                else (launch.nproc or gpus or (2 if launch.device == "cpu" else 8))
            )
            S.validate_cells(o.colls, o.sizes, o.dtype, world)
            launches = runner.plan_coll(o, workdir)
            click.echo(
                runner.describe_plan(
                    o,
                    launches,
                    world,
                    est_busbw or (200.0 if launch.device == "cuda" else 1.0),
                    est_startup or (20.0 if launch.device == "cuda" else 5.0),
                )
            )
            return
        _refuse_overwrite([prefix], launch)
        probe = detect_topology(1)
        o.backend, np_ = _resolve_device(launch.device, launch.backend, launch.nproc, probe.distributed)
        topo = detect_topology(None if probe.distributed else np_)
        S.validate_cells(o.colls, o.sizes, o.dtype, topo.world_size)
        launches = runner.plan_coll(o, workdir)
        if topo.is_main:
            click.echo(
                runner.describe_plan(
                    o,
                    launches,
                    topo.world_size,
                    est_busbw or (200.0 if launch.device == "cuda" else 1.0),
                    est_startup or (20.0 if launch.device == "cuda" else 5.0),
                ),
                err=True,
            )
        doc = _run(runner.run_coll, "coll", o, topo, workdir, prefix, launch)
    except (SpecError, LaunchError, ResultError) as e:
        raise _fail(str(e)) from None
    _finish(doc, prefix, topo.is_main)


def _run(
    run: Callable[..., dict[str, Any]],
    kind: str,
    o: Any,
    topo: Any,
    workdir: Path,
    prefix: Path,
    launch: Launch,
) -> dict[str, Any]:
    """Runs the planned launches of a coll or train benchmark (`run`: runner.run_coll or run_train): progress
    on the main rank's terminal, SIGTERM as Ctrl-C, -o PREFIX continued with --resume and written after
    every launch."""
    show = (sys.stderr.isatty() if launch.progress is None else launch.progress) and topo.is_main
    earlier = _resume_doc(launch.output, launch.resume, kind, launch.force)
    with _stoppable(), _progress(show) as bar:
        return run(
            o,
            topo,
            workdir,
            sys.argv,
            progress=bar,
            log=lambda m: click.echo(m, err=True),
            resume_from=earlier,
            checkpoint=_checkpointer(prefix, topo.is_main),
        )


def _finish(doc: dict[str, Any], prefix: Path, main: bool) -> None:
    from autoccl.bench import results as R

    if main:
        paths = R.write_outputs(doc, prefix)
        click.echo((paths[2]).read_text())
        click.echo("wrote " + ", ".join(str(p) for p in paths), err=True)
    if doc.get("status") == "interrupted":
        if main:
            click.echo(
                f"autoccl bench: interrupted; continue with the same command and --resume -o {prefix}",
                err=True,
            )
        sys.exit(130)
    if main and doc.get("failures"):
        raise _fail(f"{len(doc['failures'])} launch(es) failed (see {paths[2]})")


@dataclass(frozen=True)
class Resilience:
    """`bench train`'s fault options: the straggler-tolerant reducer and the faults injected into a run."""

    resilience: str
    straggler: str | None
    kill: str | None
    rejoin: bool
    delay: str
    clean_baseline: bool
    stall_report_s: float
    agent_stream: bool

    def extra(self, parallel: list[str], world: int, distributed: bool, iters: int) -> dict[str, Any]:
        """The workers' settings of these options, checked against the run (one sentence per bad value)."""
        from autoccl.resilience.inject import InjectionError, Kill, Straggler, check_ranks

        if self.agent_stream and self.resilience == "off":
            raise _fail("--agent-stream needs --resilience on or both (a setting of the resilient reducer)")
        if self.rejoin and not self.kill:
            raise _fail("--rejoin needs --kill (it replaces the killed rank)")
        if self.resilience == "off" and not self.straggler and not self.kill:
            return {}
        if self.resilience != "off" and parallel != ["ddp"]:
            raise _fail("--resilience needs --parallel ddp (the reducer is a DDP communication hook)")
        try:
            st = Straggler.parse(self.straggler) if self.straggler else None
            kl = Kill.parse(self.kill) if self.kill else None
            check_ranks(world, st, kl, iters)
        except InjectionError as e:
            raise _fail(str(e)) from None
        if kl is not None and self.resilience != "on":
            raise _fail("--kill needs --resilience on (synchronous DDP cannot survive a lost rank)")
        if kl is not None and kl.rank == 0 and distributed:
            raise _fail("--kill 0 needs a local launch (under torchrun, rank 0 writes the result)")
        return {
            "resilience": self.resilience,
            "straggler": st.label() if st else None,
            "kill": kl.label() if kl else None,
            "rejoin": self.rejoin,
            "delay": self.delay,
            "clean_baseline": self.clean_baseline,
            "stall_report_s": self.stall_report_s,
            "resilience_config": {"agent_stream": self.agent_stream},
        }


_resilience = O.gathered(
    "resilience",
    Resilience,
    O.choice(
        "--resilience",
        values=["off", "on", "both"],
        default="off",
        help="DDP with the straggler-tolerant, failure-surviving all-reduce (autoccl.resilience); both: "
        "each launch synchronous and resilient",
    ),
    click.option(
        "--straggler",
        default=None,
        help="RANK:PROB:FACTOR or RANK:PROB:LO-HI: on a fraction PROB of the steps that rank's step takes "
        "FACTOR (drawn in LO-HI) times its usual time",
    ),
    click.option("--kill", default=None, help="RANK:STEP: that rank is killed (SIGKILL) when it starts STEP"),
    click.option(
        "--rejoin",
        is_flag=True,
        default=False,
        help="with --kill: once the rank is dead, start a replacement worker that joins the running job "
        "(admitted after a step every rank takes part in; it receives the weights and the optimizer's state)",
    ),
    O.choice(
        "--delay",
        values=["busy", "sleep"],
        default="busy",
        help="how the straggler is slowed: busy keeps a CPU thread working (as slow compute would), "
        "sleep idles",
    ),
    click.option(
        "--clean-baseline/--no-clean-baseline",
        default=True,
        show_default=True,
        help="with --straggler/--kill, also run each launch without them (the undelayed reference)",
    ),
    click.option(
        "--stall-report-s",
        type=click.FloatRange(min=0.0, min_open=True),
        default=20.0,
        show_default=True,
        help="resilience runs: a step that takes this long writes every thread's stack to the rank's log "
        "(where a rank waits, after a recovery for instance)",
    ),
    click.option(
        "--agent-stream",
        is_flag=True,
        default=False,
        help="the resilient reducer copies and all-reduces the buckets on a CUDA stream of its own, waiting "
        "for each bucket's gradient alone (ResilienceConfig.agent_stream; off by default until measured)",
    ),
)


# Settings the harness gives each online launch itself, and what sets them instead: an --online-setting of one
# would silently run another mode, move the trace the harness reads, or differ from what the result records.
HARNESS_SETTINGS = {
    "AUTOCCL_MODE": "the --modes item",
    "AUTOCCL_TRACE": "the harness (each launch's trace, which it reads)",
    "AUTOCCL_CACHE_DIR": "the harness (a fresh cache per launch)",
    "AUTOCCL_RUN_ADDR": "the harness (each launch's own coordinator)",
    "AUTOCCL_RUN_TOKEN": "the harness (each launch's own coordinator)",
    "AUTOCCL_MAX_CHANNELS": "--channel-ceiling",
    "AUTOCCL_NCCL_CHANNELS": "--nccl-channels",
    "AUTOCCL_STEP_ARMS": "--step-arms (with --modes online-arms)",
    "AUTOCCL_MANUAL_CHANNELS": "--manual-channels (with --modes manual)",
}


def _online_settings(items: tuple[str, ...]) -> dict[str, str]:
    """--online-setting VAR=VAL items as a mapping, each a valid AUTOCCL_* setting the plugin reads that the
    harness does not set itself, each given once."""
    out: dict[str, str] = {}
    for item in items:
        var, eq, val = item.partition("=")
        var = var.strip()
        if not eq or not var.startswith("AUTOCCL_"):
            raise _fail(f"--online-setting {item!r}: expected AUTOCCL_VAR=VALUE")
        if var in HARNESS_SETTINGS:
            raise _fail(f"--online-setting {item!r}: {var} is set by {HARNESS_SETTINGS[var]}")
        if var in out:
            raise _fail(f"--online-setting: {var} given twice ({out[var]!r} and {val!r})")
        if var not in settings.BY_NAME:
            near = settings.closest(var)
            raise _fail(
                f"--online-setting {item!r}: {var} is no autoccl setting"
                + (f" (did you mean {near}?)" if near else "")
            )
        bad = settings.problems({var: val})
        if bad:
            raise _fail(f"--online-setting: {bad[0]}")
        out[var] = val
    return out


def _check_torch_profile(n: int, iters: int, data: str, resilience: Resilience) -> None:
    """--torch-profile N: the profiler warms up one iteration before the N it records, and the last
    iteration runs unprofiled, so N + 2 iterations are needed; it profiles the plain loop only."""
    if n < 0 or n > max(0, iters - 2):
        most = f"at most {iters - 2} with -n {iters}" if iters > 2 else f"0 with -n {iters}"
        raise _fail(
            f"--torch-profile {n}: N must be 0 (off) or 1..iterations - 2 ({most}): one warm-up iteration "
            "comes before the N profiled ones and the last iteration runs unprofiled"
        )
    if n > 0 and (
        data != "random" or resilience.resilience != "off" or resilience.straggler or resilience.kill
    ):
        raise _fail(
            "--torch-profile profiles the plain training loop: not with --data markov, --resilience, "
            "--straggler or --kill"
        )


# `bench train`'s model without --preset: 350m on GPUs; on CPUs (gloo) 350m's two ranks with AdamW took
# more than 23 GB and the OOM killer ended one, so there a model that runs in seconds.
DEFAULT_TRAIN_PRESET = {"cuda": "350m", "cpu": "tiny"}


@bench.command("train")
@click.option(
    "--preset",
    default=None,
    help="tiny, 125m, 350m, 760m, 1.3b [default: 350m with --device cuda; tiny with --device cpu: two 350m "
    "ranks on CPUs need more than 23 GB of memory]",
)
@click.option("--parallel", default="fsdp2,ddp", show_default=True, help="fsdp2, ddp (comma-separated)")
@click.option(
    "--modes",
    "-m",
    multiple=True,
    default=["nccl,online"],
    show_default=True,
    help="nccl, static:VAR=VAL[,...], online, online-arms (online with the step guard's channel arms, "
    "--step-arms), manual, table (a second start: table mode from the table the round's online launch "
    "left, judged on the step by the guard; needs online)",
)
@click.option("--iters", "-n", type=click.IntRange(min=2), default=200, show_default=True)
@click.option(
    "--batch", type=click.IntRange(min=1), default=4, show_default=True, help="micro-batch per rank"
)
@click.option(
    "--seq",
    type=int,
    default=None,
    help="tokens per sample [default: 1024, or the preset's context where it is shorter]",
)
@O.choice("--dtype", values=["bf16", "fp16", "fp32"], default="bf16")
@click.option("--bucket-mb", type=int, default=25, show_default=True, help="DDP bucket size")
@click.option(
    "--lr",
    type=click.FloatRange(0.0, min_open=True),
    default=3e-4,
    show_default=True,
    help="AdamW learning rate",
)
@O.choice(
    "--data",
    values=["random", "markov"],
    default="random",
    help="random tokens, or tokens of a fixed Markov chain a model can learn (for loss comparisons)",
)
@click.option(
    "--manual-channels",
    default="2,max",
    show_default=True,
    help="mode manual: channels for the calls an iteration hides, and for its last call (max: the "
    "communicator's; --channel-ceiling widens it)",
)
@click.option(
    "--step-arms",
    default="hidden=2,8",
    show_default=True,
    help="mode online-arms: the channel caps and protocols for hidden calls the step guard compares on the "
    "step, each optionally with a floor for the step's last call, e.g. hidden=2,8,simple,2/ll128,2+max "
    "(AUTOCCL_STEP_ARMS, docs/online-search.md)",
)
@click.option(
    "--pairs",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="run the modes' launches this many times, one round after another (interleaved launch pairs, every "
    "second round in reverse order); "
    "from 2 on, -o PREFIX gets PREFIX-pairK files and PREFIX.pairs/ their summary (`bench train-pairs`)",
)
@click.option(
    "--online-setting",
    "online_settings",
    multiple=True,
    metavar="VAR=VAL",
    help="an AUTOCCL_* setting for the online modes' launches (repeatable), e.g. "
    "AUTOCCL_EXPOSURE_EVERY=8; the launches do not inherit this shell's AUTOCCL_* variables",
)
@click.option(
    "--torch-profile",
    type=int,
    default=0,
    show_default=True,
    metavar="N",
    help="profile N iterations before the last with torch.profiler (after one warm-up iteration): a Chrome "
    "trace per rank in the launch's folder and the ground truth of which NCCL calls the step waited for "
    "(`exposure_truth` in the result; beside an online launch's exposure estimate, exposure-truth.md). The "
    "N + 1 profiled iterations are slower (their times stay in the result); 0: off",
)
@_resilience
@_channel_ceiling
@_nccl_channels
@_launch
def train(
    preset: str | None,
    parallel: str,
    modes: tuple[str, ...],
    iters: int,
    batch: int,
    seq: int | None,
    dtype: str,
    bucket_mb: int,
    lr: float,
    data: str,
    manual_channels: str,
    step_arms: str,
    pairs: int,
    online_settings: tuple[str, ...],
    torch_profile: int,
    resilience: Resilience,
    channel_ceiling: int | None,
    nccl_channels: int | str | None,
    launch: Launch,
) -> None:
    """Iteration time of a GPT-style training step (FSDP2 / DDP) per mode, with per-iteration traces.

    Plain NCCL moves between launches by as much as a tuner gains: `--pairs 5` runs five rounds of the modes'
    launches and summarises them as launch pairs (median speed, its interval, plain's own spread)."""
    from autoccl.bench import modes as M
    from autoccl.bench import runner
    from autoccl.bench.launch import LaunchError, detect_topology
    from autoccl.bench.presets import PRESETS

    if preset is None:
        preset = DEFAULT_TRAIN_PRESET[launch.device]
        click.echo(
            f"autoccl bench train: --preset {preset} (the default with --device {launch.device})", err=True
        )
    preset = preset.lower()
    if preset not in PRESETS:
        raise _fail(f"unknown preset {preset!r}; expected one of {', '.join(PRESETS)}")
    pars = [p.strip().lower() for p in parallel.split(",") if p.strip()]
    bad = [p for p in pars if p not in ("fsdp2", "ddp")]
    if bad or not pars:
        raise _fail(f"unknown parallelism {', '.join(bad) or parallel!r}; expected fsdp2, ddp")
    if seq is None:
        seq = min(1024, PRESETS[preset].max_seq)
    if seq < 2:
        raise _fail(f"--seq {seq}: a sample needs at least 2 tokens")
    if seq > PRESETS[preset].max_seq:
        raise _fail(f"--seq {seq} exceeds preset {preset}'s context ({PRESETS[preset].max_seq})")
    bad_manual = settings.problems({"AUTOCCL_MANUAL_CHANNELS": manual_channels})
    if bad_manual:
        raise _fail(f"--manual-channels: {bad_manual[0]}")
    bad_arms = settings.problems({"AUTOCCL_STEP_ARMS": step_arms})
    if bad_arms:
        raise _fail(f"--step-arms: {bad_arms[0]}")
    _check_torch_profile(torch_profile, iters, data, resilience)
    online_env = _online_settings(online_settings)
    try:
        ms = M.parse_modes(modes, baseline_first=False, kinds=M.TRAIN_MODE_KINDS)
        if online_env and not any(m.kind in M.ONLINE_MODES for m in ms):
            click.echo(
                "autoccl bench train: --online-setting applies to online modes only, and --modes has none",
                err=True,
            )
        probe = detect_topology(1)
        be, np_ = _resolve_device(launch.device, launch.backend, launch.nproc, probe.distributed)
        topo = detect_topology(None if probe.distributed else np_)
        extra = {"bucket_mb": bucket_mb, "lr": lr, "data": data}
        extra.update(resilience.extra(pars, topo.world_size, topo.distributed, iters))
        ceiling, capped = _online_channels(ms, channel_ceiling, nccl_channels, be)
        o = runner.TrainOptions(
            preset=preset,
            parallel=pars,
            modes=ms,
            device=launch.device,
            backend=be,
            iters=iters,
            batch=batch,
            seq=seq,
            dtype=dtype,
            timeout_s=launch.timeout,
            seed=launch.seed,
            online_channel_ceiling=ceiling,
            online_nccl_channels=capped,
            manual_channels=manual_channels,
            step_arms=step_arms,
            torch_profile=torch_profile,
            online_settings=online_env,
            extra=extra,
        )
        prefix = launch.output or _default_prefix("train")
        refuse_unwritable(str(prefix), folders_made=True)  # missing folders are made when written
        rounds = (
            [prefix]
            if pairs == 1
            else [prefix.with_name(f"{prefix.name}-pair{k}") for k in range(1, pairs + 1)]
        )
        _refuse_overwrite(rounds, launch)
        started = [r for r in rounds if r.with_name(r.name + ".json").is_file()]
        if pairs > 1 and launch.resume and not started:
            raise _fail(
                f"--resume: no round of {prefix} exists ({rounds[0].name}.json ...): nothing to continue"
            )
        for k, round_prefix in enumerate(rounds, 1):
            if pairs > 1 and topo.is_main:
                click.echo(f"autoccl bench train: launch round {k} of {pairs}", err=True)
            workdir = round_prefix.with_name(round_prefix.name + ".logs")
            # every second round launches the modes in reverse order: a machine that warms or slows over a
            # round then weighs on both sides (`bench train-pairs` gives each order's median); table mode
            # stays after the online launch whose table it reads
            ro = replace(o, modes=M.round_order(o.modes, reverse=k % 2 == 0))
            runner.plan_train(ro, workdir)
            # --resume continues the rounds that were started; those after them run from the start
            this = replace(launch, output=round_prefix, resume=launch.resume and round_prefix in started)
            doc = _run(runner.run_train, "train", ro, topo, workdir, round_prefix, this)
            if topo.is_main:
                from autoccl.bench.curves import plot_curves

                curves = plot_curves(doc, round_prefix.with_name(round_prefix.name + ".curves.png"))
                if curves is not None:
                    click.echo(f"wrote {curves}", err=True)
            _finish(doc, round_prefix, topo.is_main)  # an interrupted round ends the command here
    except (SpecError, LaunchError) as e:
        raise _fail(str(e)) from None
    if pairs > 1 and topo.is_main:
        names = {m.name for m in ms}
        # plain NCCL against each tuned mode: PREFIX.pairs (online), PREFIX.pairs-<mode> (the others)
        tuned = [m for m in TUNED_TRAIN_MODES if {"nccl", m} <= names]
        for m in tuned:
            _write_train_pairs(
                [r.with_name(r.name + ".json") for r in rounds],
                prefix.with_name(prefix.name + (".pairs" if m == "online" else f".pairs-{m}")),
                mode=m,
            )
        if not tuned:  # the rounds stand; a pair is plain NCCL against a tuned mode
            click.echo(
                f"autoccl bench train: no pair of nccl and {', '.join(TUNED_TRAIN_MODES)} in --modes, the "
                "rounds are not summarised",
                err=True,
            )


@bench.command("nccl-tests")
@click.option(
    "--bin",
    "bin_dir",
    type=click.Path(path_type=Path),
    default=None,
    help="nccl-tests build directory (*_perf, *_perf_mpi for --launch mpi); required unless --report-only",
)
@click.option(
    "--colls",
    "-c",
    default=DEFAULT_COLLS,
    show_default=True,
    help="all_gather, reduce_scatter, all_reduce, ...",
)
@click.option(
    "--mode",
    "-m",
    "modes",
    multiple=True,
    default=["plain", "online"],
    show_default=True,
    help="plain, online, observe, idle (plugin loaded, nothing to apply), table; or NAME:ARGS with "
    "`autoccl run` options and VAR=VALUE, e.g. 'kclock:--mode observe AUTOCCL_CLOCK=kernel' (repeatable)",
)
@click.option(
    "--launch",
    "launches",
    default="single",
    show_default=True,
    help="single (one process for every GPU, -g N), mpi (one process per GPU through mpirun), or both",
)
@click.option("--gpus", "-g", type=int, default=None, help="GPUs per launch [default: every visible GPU]")
@click.option("--begin", "-b", default="1M", show_default=True, help="smallest size (nccl-tests -b)")
@click.option("--end", "-e", default="1G", show_default=True, help="largest size (-e)")
@click.option("--factor", "-f", type=int, default=2, show_default=True, help="size factor (-f)")
@click.option(
    "--warmup",
    "-w",
    type=click.IntRange(min=0),
    default=20,
    show_default=True,
    help="warm-up iterations (-w)",
)
@click.option(
    "--iters", "-n", type=click.IntRange(min=1), default=40, show_default=True, help="timed iterations (-n)"
)
@click.option("--passes", "-p", type=int, default=3, show_default=True, help="interleaved passes per mode")
@click.option(
    "--order",
    type=click.Choice(["rotate", "fixed"]),
    default="rotate",
    show_default=True,
    help="the modes' order in a pass: rotate (moved one place each pass, so a machine warming or slowing "
    "over a pass weighs on every mode alike; a mode reading another's table stays right after it) or "
    "fixed (as given)",
)
@click.option("--trace", is_flag=True, help="trace the autoccl modes (cross-rank agreement, pinned tasks)")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.0, min_open=True),
    default=300.0,
    show_default=True,
    help="seconds per launch",
)
@click.option("--mpirun", default="mpirun", show_default=True, help="MPI launcher for --launch mpi")
@click.option("--nt-args", default="", help="further nccl-tests arguments, e.g. '-d bfloat16'")
@O.output_folder("outdir", "output folder", required=True)
@O.progress
@click.option(
    "--report-only", is_flag=True, help="launch nothing: summarise OUTDIR/launches.jsonl of an earlier run"
)
def nccl_tests(
    bin_dir: Path | None,
    colls: str,
    modes: tuple[str, ...],
    launches: str,
    gpus: int | None,
    begin: str,
    end: str,
    factor: int,
    warmup: int,
    iters: int,
    passes: int,
    order: str,
    trace: bool,
    timeout: float,
    mpirun: str,
    nt_args: str,
    outdir: Path,
    progress: bool | None,
    report_only: bool,
) -> None:
    """NVIDIA's nccl-tests under plain NCCL and autoccl, interleaved passes, ratios with their spread.

    Writes OUTDIR/launches.jsonl (every launch; a rerun into the same folder resumes), summary.json,
    summary.md and ratio.png; with --trace tasks.md and, where ranks were decided over TCP, coordinator.md.
    Example: autoccl bench nccl-tests --bin ~/nccl-tests/build -o out/
    """
    import json as _json
    import shlex

    from autoccl.bench import nccl_tests as NT
    from autoccl.cli.tuner import run_options_problem

    interrupted = False
    made: list[Path] = []  # folders this run made for -o (a refusal before any launch removes them)
    try:
        if bin_dir is None and not report_only:
            raise NT.BenchError(
                "--bin DIR is required (the nccl-tests build directory), unless --report-only"
            )
        mode_list = [
            NT.parse_mode(t) for m in modes for t in ([m] if ":" in m else m.split(",")) if t.strip()
        ]
        launch_list = [x.strip() for x in launches.split(",") if x.strip()]
        bad = [x for x in launch_list if x not in NT.LAUNCHES]
        if bad or not launch_list:
            raise NT.BenchError(f"--launch {launches!r}: expected single, mpi or both")
        plan = NT.Plan(
            bin_dir=bin_dir or Path("."),
            out=outdir,
            colls=[c.strip() for c in colls.split(",") if c.strip()],
            modes=mode_list,
            launches=launch_list,
            gpus=gpus if gpus is not None else 0,
            begin=NT.size_arg(begin),
            end=NT.size_arg(end),
            factor=factor,
            warmup=warmup,
            iters=iters,
            passes=passes,
            order=order,
            timeout=timeout,
            trace=trace,
            extra_args=shlex.split(nt_args),
            mpirun=mpirun,
            baseline=mode_list[0].name if mode_list else "plain",
        )
        if report_only:
            records, unreadable = NT.read_launches(outdir)
        else:
            plan.validate_binaries()  # a wrong --bin before nvidia-smi is asked for the GPUs
            if gpus is None:
                plan.gpus = _visible_gpus()
            plan.validate()
            made = [d for d in (outdir, *outdir.parents) if not d.exists()]  # deepest first
            outdir.mkdir(parents=True, exist_ok=True)
            show = sys.stderr.isatty() if progress is None else progress
            say = lambda m: click.echo(f"autoccl bench nccl-tests: {m}", err=True)  # noqa: E731
            try:
                with _stoppable(), _progress(show) as bar:
                    records = NT.run_plan(plan, progress=bar, notify=say, check=run_options_problem)
                unreadable = 0
            except KeyboardInterrupt:
                # the launch under way was killed with its processes; what finished is in launches.jsonl
                interrupted = True
                say(
                    "interrupted: the launch under way was stopped; the finished launches are summarised "
                    "below, and the same command continues the run"
                )
                if (
                    not (outdir / "launches.jsonl").is_file()
                    or not NT.scan_launches(outdir / "launches.jsonl")[0]
                ):
                    sys.exit(130)
                records, unreadable = NT.read_launches(outdir)
    except NT.BenchError as e:
        with contextlib.suppress(OSError):  # refused before a launch: the folders made go too (only if empty)
            for d in made:
                d.rmdir()
        raise _fail(str(e)) from None
    if unreadable:
        click.echo(
            f"autoccl bench nccl-tests: {NT.unreadable_note(unreadable, outdir / 'launches.jsonl')}", err=True
        )
    baseline = plan.baseline
    if report_only:  # the run's own baseline, not this command's default
        earlier = outdir / "summary.json"
        if earlier.is_file():
            baseline = str(_json.loads(earlier.read_text()).get("baseline") or baseline)
    # the passes the launches hold, not -p: a run stopped early, or --report-only given another -p
    passes = NT.passes_in(records, baseline)
    held = NT.passes_text(passes)
    span = (
        f"{plan.begin}..{plan.end} x{plan.factor}, -w {plan.warmup} -n {plan.iters} -c 1, {plan.gpus} GPUs, "
        f"{held} ({plan.order} order)"
    )
    header = ""
    if report_only:
        # The run's own header: what was launched, not this command's defaults.
        first = (
            (outdir / "summary.md").read_text().splitlines()[:1] if (outdir / "summary.md").is_file() else []
        )
        if first and first[0].startswith("nccl-tests "):
            header = NT.with_passes(first[0], passes) + "\n"
        else:  # what the launches say, not this command's defaults (-w/-n and GPUs are not in them)
            sizes = sorted({int(row["bytes"]) for r in records for row in r.get("rows", [])})
            shown = f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes" if sizes else "(no result rows"
            span = f"{shown}, from launches.jsonl), {held}"
    header = header or f"nccl-tests {span}; busbw (out-of-place) relative to {baseline} of the same pass\n"
    summary = NT.summarize(records, baseline=baseline)
    summary["unreadable_lines"] = unreadable
    (outdir / "summary.json").write_text(jsonout.dumps(summary, indent=1))
    md = NT.markdown(summary, header)
    (outdir / "summary.md").write_text(md)
    if any(r.get("pinned") for r in records):
        (outdir / "tasks.md").write_text(NT.task_table(records, summary))
    if any(r.get("coordinator") for r in records):
        (outdir / "coordinator.md").write_text(NT.coordinator_table(records))
    NT.plot(summary, outdir / "ratio.png")
    click.echo(md)
    if interrupted:
        sys.exit(130)
    failed = sum(1 for r in records if r.get("rc") != 0)
    errors = sum(int(r.get("data_errors", 0)) for r in records)
    if failed or errors:
        raise _fail(f"{failed} launch(es) failed and {errors} data error(s); see {outdir}/logs")


@bench.command("train-pairs")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=Path))
@O.output_folder("outdir", "output folder", required=True)
@click.option("--baseline", default="nccl", show_default=True, help="the mode each pair is measured against")
@click.option("--mode", default="online", show_default=True, help="the mode measured against the baseline")
def train_pairs(paths: tuple[Path, ...], outdir: Path, baseline: str, mode: str) -> None:
    """Summarise interleaved launch pairs of `autoccl bench train` (result files, or folders of them).

    Per parallel kind: each pair's speed ratio (baseline steady ms / mode steady ms), their median with a
    95 % bootstrap interval, the baseline's own spread between pairs, each launch's drift. Writes
    OUTDIR/pairs.csv, iterations.json, summary.json, summary.md and steps.png.
    Example: autoccl bench train-pairs out/train -o out/train/pairs
    """
    _write_train_pairs(paths, outdir, baseline, mode)


def _write_train_pairs(
    paths: Iterable[Path], outdir: Path, baseline: str = "nccl", mode: str = "online"
) -> None:
    """`bench train-pairs`'s outputs in OUTDIR: pairs.csv, iterations.json, summary.json/md, steps.png."""
    import csv

    from autoccl.bench import train_pairs as TP
    from autoccl.bench.nccl_tests import BenchError

    try:
        pairs = TP.read_pairs(paths)
        summary = TP.summarize(pairs, baseline=baseline, mode=mode)
    except BenchError as e:
        raise _fail(str(e)) from None
    for w in summary["warnings"]:
        click.echo(f"warning: {w}", err=True)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = TP.csv_rows(summary)
    with open(outdir / "pairs.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    steps = TP.iterations(summary, pairs)
    (outdir / "iterations.json").write_text(jsonout.dumps(steps, separators=(",", ":")))
    (outdir / "summary.json").write_text(jsonout.dumps(summary, indent=1))
    md = TP.markdown(summary)
    (outdir / "summary.md").write_text(md)
    TP.plot(summary, pairs, outdir / "steps.png")
    click.echo(md)
    click.echo(f"wrote {outdir}/pairs.csv, iterations.json, summary.json, summary.md, steps.png", err=True)


def _visible_gpus() -> int:
    import subprocess

    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        raise _fail("no GPU count: nvidia-smi is not available; give --gpus") from None
    n = sum(1 for line in out.splitlines() if line.startswith("GPU "))
    if n == 0:
        raise _fail("nvidia-smi lists no GPU; give --gpus")
    return n


@click.command()
@click.argument("results", nargs=-1, type=click.Path(exists=True, dir_okay=False))
@O.output_folder("outdir", "folder of the plots and tables", required=True)
@click.option(
    "--format", "formats", default="png,svg", show_default=True, help="png, svg, pdf (comma-separated)"
)
@click.option(
    "--mix",
    is_flag=True,
    help="merge coll files measured with different settings (refused otherwise); the report says "
    "which differ",
)
@click.option(
    "--trace",
    "traces",
    multiple=True,
    help="a plugin trace (AUTOCCL_TRACE prefix or .jsonl file; repeatable): plots the time of every timed "
    "call by task and the decisions over the calls",
)
@click.option(
    "--rank", type=click.IntRange(min=0), default=0, show_default=True, help="the rank a --trace is read for"
)
def report(
    results: tuple[str, ...], outdir: Path, formats: str, mix: bool, traces: tuple[str, ...], rank: int
) -> None:
    """Draw plots and tables from stored benchmark results (several coll files of the same settings are
    merged: the parts of one matrix run in separate commands) and from plugin traces (--trace)."""
    from autoccl.bench import report as rep
    from autoccl.bench import trace_plot
    from autoccl.bench.results import ResultError

    if not results and not traces:
        raise _fail("nothing to report: give result files, --trace, or both")
    fmts = [f.strip().lower() for f in formats.split(",") if f.strip()]
    if not fmts or any(f not in ("png", "svg", "pdf") for f in fmts):
        raise _fail(f"bad --format {formats!r}; expected png, svg, pdf")
    written: list[Path] = []
    try:
        if results:
            written += rep.make_report([Path(r) for r in results], outdir, fmts, mix=mix)
        if traces:
            written += trace_plot.plot_trace(
                trace_plot.resolve_traces(traces),
                outdir,
                fmts,
                rank=rank,
                warn=lambda m: click.echo(f"autoccl report: {m}", err=True),
            )
    except (ResultError, trace_plot.TraceError) as e:
        raise _fail(str(e)) from None
    for p in written:
        click.echo(str(p))
