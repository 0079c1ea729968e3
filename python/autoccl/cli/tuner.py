"""`autoccl env`, `autoccl run`, `autoccl cache`: load the plugin into any NCCL program, manage tables."""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console
from rich.table import Table as RichTable

from autoccl import settings, tables
from autoccl._paths import ArtefactNotFound
from autoccl.cli.channels import ChannelsOrAuto, resolve_nccl_channels
from autoccl.tuner_env import MODES, MPI_LAUNCHERS, mpi_forwarding, plugin_env, this_host_address

F = TypeVar("F", bound=Callable[..., Any])

_mode = click.option(
    "--mode",
    type=click.Choice(MODES),
    default="online",
    show_default=True,
    help="What the plugin does: tune online (online), change nothing (observe), force rules (fixed), apply "
    "a saved table (table). Online, every rank meets at one coordinator: the launcher's (torchrun, srun), "
    "else the one `autoccl run` gives its job (AUTOCCL_RUN_ADDR); docs/architecture.md.",
)
_fixed = click.option(
    "--fixed",
    "fixed",
    default=None,
    help="fixed-mode rules, e.g. 'allreduce@1M-64M:ring/ll128/16;*:ring/simple'.",
)
_table = click.option(
    "--table",
    "table",
    type=click.Path(dir_okay=False),
    default=None,
    help="table file for table mode (default: the cache entry of this machine's fingerprint).",
)
_trace = click.option(
    "--trace",
    default=None,
    help="path prefix of per-process JSONL traces of every call (its directory must exist).",
)
_ceiling = click.option(
    "--channel-ceiling",
    type=click.IntRange(0, 64),
    default=None,
    help="create communicators with this many channels (NCCL_MIN_CTAS=NCCL_MAX_CTAS) so the "
    "tuner can use more than NCCL's default; changes NCCL's own default too. Online mode's default: 64, "
    "with NCCL's own calls capped at a plain communicator's count (asked of NCCL here); 0: NCCL's own.",
)
_nccl_channels = click.option(
    "--nccl-channels",
    type=ChannelsOrAuto(),
    default=None,
    help="at most this many channels for every call whose channel count the plugin leaves to NCCL. "
    "With --channel-ceiling, give the count NCCL creates without it (24 on 2 or 4 x H200), or 'auto': "
    "NCCL creates one plain communicator over this host's GPUs first and says its count. NCCL's own "
    "choice then runs as on a plain communicator instead of on all the ceiling's channels (slower at "
    "1-2 MiB). Every rank of a job must get the same count: on several hosts that are not identical "
    "machines, give the number.",
)
_probe_gpus = click.option(
    "--probe-gpus",
    type=click.IntRange(2, 64),
    default=None,
    help="GPUs the --nccl-channels auto communicator spans (default: every visible GPU; give the "
    "job's GPUs per host if it uses fewer).",
)
_cache = click.option("--cache-dir", default=None, help="tuning-table cache directory.")


def _check_table_option(mode: str, table: str | None) -> str | None:
    """--table as an absolute path; in table mode it must be a valid table (the library's schema)."""
    if not table:
        return None
    path = Path(table).expanduser().resolve()
    if mode == "table":
        try:
            tables.load_table(path)
        except tables.TableError as e:
            raise click.ClickException(f"--table {table}: {e}") from None
    return str(path)


def _build_env(
    mode: str,
    fixed: str | None,
    table: str | None,
    trace: str | None,
    ceiling: int | None,
    cache_dir: str | None,
    nccl_channels: int | str | None = None,
    probe_gpus: int | None = None,
    run_host: str | None = None,
) -> dict[str, str]:
    """The plugin's variables for a job, checked as the library checks them (and the AUTOCCL_* variables
    already in this environment with them): a value the library would refuse is an error here, before
    anything starts."""
    try:
        settings.check(readers=("library", "cli"))  # what the user exported, before it reaches a job
    except settings.SettingError as e:
        raise click.ClickException(str(e)) from None
    if fixed is not None:
        why = settings.fixed_rules_problem(fixed, ceiling or 64)
        if why:
            raise click.ClickException("--fixed: " + why.removeprefix("AUTOCCL_FIXED "))
    if mode != "fixed" and fixed is not None:
        raise click.UsageError(f"--fixed applies to --mode fixed, not {mode}")
    if mode not in ("table", "observe") and table is not None:
        raise click.UsageError(f"--table applies to --mode table or observe, not {mode}")
    table = _check_table_option(mode, table)
    extra: dict[str, str] = {}
    if mode == "online" and ceiling is None and nccl_channels is None:
        ceiling, nccl_channels = _default_ceiling(probe_gpus)
    elif ceiling == 0:  # NCCL's own communicators: the tuner chooses within NCCL's channel count
        ceiling = None
    nccl_channels = resolve_nccl_channels(nccl_channels, probe_gpus, "--nccl-channels")
    if ceiling is not None:
        extra.update({"NCCL_MIN_CTAS": str(ceiling), "NCCL_MAX_CTAS": str(ceiling)})
        if nccl_channels is None:
            click.echo(
                f"autoccl: --channel-ceiling {ceiling} also spreads NCCL's own choice over {ceiling} "
                "channels (slower at 1-2 MiB); --nccl-channels <count of a plain communicator> (or auto) "
                "keeps it",
                err=True,
            )
    try:
        env = plugin_env(
            mode,
            fixed=fixed,
            table=table,
            cache_dir=str(Path(cache_dir).expanduser().resolve()) if cache_dir else None,
            trace=str(Path(trace).expanduser().resolve()) + ("/" if trace.endswith("/") else "")
            if trace
            else None,
            max_channels=ceiling,
            nccl_channels=nccl_channels,
            extra=extra,
            run_host=run_host,
        )
    except (ValueError, ArtefactNotFound) as e:
        raise click.UsageError(str(e)) from e
    option_of = {"AUTOCCL_TRACE": "--trace", "AUTOCCL_CACHE_DIR": "--cache-dir", "AUTOCCL_TABLE": "--table"}
    found = settings.problems({**os.environ, **env})
    if found:
        name = found[0].split("=", 1)[0]
        prefix = f"{option_of[name]}: " if name in env and name in option_of else ""
        raise click.ClickException(prefix + found[0])
    return env


# Online mode creates communicators with this many channels so that the tuner can give a large
# collective more than NCCL's default (2 x H100: 64 channels ran all_gather / reduce_scatter 128 MiB-1 GiB
# 1.19-1.28x and all_reduce 1.08-1.11x faster than NCCL's 24, benchmarks/results/h100x2/), while the calls
# it leaves to NCCL keep a plain communicator's count.
DEFAULT_ONLINE_CEILING = 64


def _default_ceiling(probe_gpus: int | None) -> tuple[int | None, int | None]:
    """Online mode without --channel-ceiling/--nccl-channels: raise the ceiling and cap NCCL's own calls at
    the count NCCL gives a plain communicator here; where NCCL cannot be asked (no GPU, no NCCL library),
    NCCL's own communicators, said on stderr."""
    from autoccl import nccl_probe

    if not Path("/proc/driver/nvidia/gpus").is_dir():  # no NVIDIA driver: nothing to ask, nothing to raise
        return None, None
    try:
        found = nccl_probe.probe_plain_channels(probe_gpus)
    except nccl_probe.ProbeError as e:
        click.echo(
            f"autoccl: NCCL's plain channel count is unknown here ({e}); tuning within NCCL's own channels "
            "(give --channel-ceiling 64 --nccl-channels N to let the tuner use more)",
            err=True,
        )
        return None, None
    if found.channels >= DEFAULT_ONLINE_CEILING:
        return None, None
    click.echo(
        f"autoccl: communicators with {DEFAULT_ONLINE_CEILING} channels; calls left to NCCL keep its "
        f"{found.channels} (a plain communicator over {found.ranks} GPUs here; "
        "--channel-ceiling 0: NCCL's own)",
        err=True,
    )
    return DEFAULT_ONLINE_CEILING, found.channels


def _plugin_options(command: F) -> F:
    """The options that build the plugin environment, shared by `env` and `run`."""
    options = (_mode, _fixed, _table, _trace, _ceiling, _nccl_channels, _probe_gpus, _cache)
    for option in reversed(options):
        command = option(command)
    return command


@click.command()
@_plugin_options
@click.option("--shell", type=click.Choice(["sh", "fish"]), default="sh", show_default=True)
def env(
    mode: str,
    fixed: str | None,
    table: str | None,
    trace: str | None,
    channel_ceiling: int | None,
    nccl_channels: int | str | None,
    probe_gpus: int | None,
    cache_dir: str | None,
    shell: str,
) -> None:
    """Print the variables that load the plugin: eval "$(autoccl env --mode observe)".

    In mode online no coordinator address is printed (jobs started from one shell must not share one):
    under torchrun and srun the library derives its job's own; start other multi-process jobs with
    `autoccl run`, or export AUTOCCL_COORD_ADDR and AUTOCCL_COORD_TOKEN for each job."""
    variables = _build_env(mode, fixed, table, trace, channel_ceiling, cache_dir, nccl_channels, probe_gpus)
    if mode == "online":
        click.echo(
            "autoccl env: no coordinator address exported; jobs under torchrun or srun derive their own, "
            "for others use `autoccl run` (or export AUTOCCL_COORD_ADDR and AUTOCCL_COORD_TOKEN per job)",
            err=True,
        )
    for key, value in variables.items():
        if shell == "fish":
            click.echo(f"set -gx {key} {shlex.quote(value)}")
        else:
            click.echo(f"export {key}={shlex.quote(value)}")


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@_plugin_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, required=True)
def run(
    mode: str,
    fixed: str | None,
    table: str | None,
    trace: str | None,
    channel_ceiling: int | None,
    nccl_channels: int | str | None,
    probe_gpus: int | None,
    cache_dir: str | None,
    command: tuple[str, ...],
) -> None:
    """Run COMMAND (torchrun, mpirun, srun, nccl-tests, ...) with the plugin loaded.

    Example: autoccl run --mode observe -- torchrun --nproc-per-node 4 train.py
    """
    launcher = Path(command[0]).name
    mpi = launcher in MPI_LAUNCHERS
    run_host = "127.0.0.1"
    if mpi and mode == "online":
        # the ranks mpirun starts on other hosts reach this one's coordinator (the launch host's ranks
        # serve it); without a network the job is on this host alone
        run_host = this_host_address() or "127.0.0.1"
    built = _build_env(
        mode, fixed, table, trace, channel_ceiling, cache_dir, nccl_channels, probe_gpus, run_host
    )
    if mpi:
        built.update(mpi_forwarding(built, os.environ))
    child_env = {**os.environ, **built}
    exe = shutil.which(command[0], path=child_env.get("PATH"))
    if exe is None:
        raise click.UsageError(f"command not found: {command[0]}")
    sys.stdout.flush()
    sys.stderr.flush()
    os.execvpe(exe, list(command), child_env)


@click.group()
def cache() -> None:
    """Inspect and manage saved tuning tables (one per machine fingerprint)."""


@cache.command("list")
@_cache
def cache_list(cache_dir: str | None) -> None:
    """List cached tables."""
    console = Console()
    paths = _cached(cache_dir)
    if not paths:
        console.print(f"no tables in {tables.tables_dir(cache_dir)}")
        return
    view = RichTable(title=str(tables.tables_dir(cache_dir)))
    view.add_column("fingerprint", no_wrap=True, min_width=16)
    for col in ("gpu", "gpus", "ranks", "nodes", "nccl", "tasks", "created"):
        view.add_column(col)
    unreadable: list[str] = []
    for path in paths:
        try:
            t = tables.load_table(path, path.name.removesuffix(tables.TABLE_SUFFIX))
        except tables.TableError as e:
            unreadable.append(f"{path.name}: unreadable ({e}); the plugin moves it aside at its next write")
            continue
        m = t.meta
        view.add_row(
            t.fingerprint,
            m.get("gpu", "?"),
            m.get("gpus", "?"),
            m.get("ranks", "?"),
            m.get("nodes", "?"),
            m.get("nccl", "?"),
            str(len(t.tasks)),
            m.get("created", "?"),
        )
    console.print(view)
    for line in unreadable:
        console.print(line, style="red", soft_wrap=True, markup=False)


def _cached(cache_dir: str | None) -> list[Path]:
    try:
        return tables.cached_tables(cache_dir)
    except tables.TableError as e:
        raise click.ClickException(f"cache: {e}") from None


def _by_fingerprint(ref: str, cache_dir: str | None) -> Path:
    """The cached table whose fingerprint starts with `ref` (hex digits): exactly one, else an error."""
    if not ref or not all(c in "0123456789abcdef" for c in ref) or len(ref) > 16:
        raise click.UsageError(
            f"{ref!r} is not a fingerprint or a prefix of one "
            "(1-16 lower-case hex digits; `autoccl cache list`)"
        )
    matches = [p for p in _cached(cache_dir) if p.name.startswith(ref)]
    if len(matches) != 1:
        listed = ", ".join(p.name.removesuffix(tables.TABLE_SUFFIX) for p in matches[:5])
        raise click.UsageError(
            f"{ref!r} matches {len(matches)} cached tables{': ' + listed if listed else ''}; "
            "give a unique prefix of a fingerprint"
        )
    return matches[0]


def _resolve(ref: str, cache_dir: str | None) -> Path:
    """A table file to read: an existing file, else a cached table by fingerprint prefix."""
    path = Path(ref)
    if ref and path.is_file():
        return path
    return _by_fingerprint(ref, cache_dir)


@cache.command("show")
@click.argument("ref")
@_cache
def cache_show(ref: str, cache_dir: str | None) -> None:
    """Show one table (a fingerprint prefix or a file)."""
    try:
        t = tables.load_table(_resolve(ref, cache_dir))
    except tables.TableError as e:
        raise click.ClickException(str(e)) from e
    console = Console()
    console.print(
        f"fingerprint {t.fingerprint}  " + " ".join(f"{k}={v}" for k, v in t.meta.items()), markup=False
    )
    view = RichTable()
    keys: list[str] = []
    for task in t.tasks:
        keys += [k for k in task if k not in keys]
    for k in keys:
        view.add_column(k, no_wrap=True)
    for task in t.tasks:
        view.add_row(*(task.get(k, "") for k in keys))
    console.print(view)


@cache.command("clear")
@click.argument("ref", required=False)
@click.option("--all", "everything", is_flag=True, help="delete every cached table")
@click.option("--yes", is_flag=True, help="do not ask")
@_cache
def cache_clear(ref: str | None, everything: bool, yes: bool, cache_dir: str | None) -> None:
    """Delete one cached table (a unique fingerprint prefix), or all of them with --all."""
    if ref is not None and everything:
        raise click.UsageError("give a fingerprint prefix or --all, not both")
    if ref is None and not everything:
        raise click.UsageError("give the fingerprint (or a unique prefix) of the table to delete, or --all")
    paths = _cached(cache_dir) if everything else [_by_fingerprint(ref or "", cache_dir)]
    if not paths:
        click.echo(f"no tables in {tables.tables_dir(cache_dir)}")
        return
    if not yes:
        click.confirm(f"delete {len(paths)} table(s) from {tables.tables_dir(cache_dir)}?", abort=True)
    for p in paths:
        with tables.table_lock(p):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink(missing_ok=True)
    click.echo(f"deleted {len(paths)} table(s)")


@cache.command("export")
@click.argument("ref")
@click.argument("dest", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="replace DEST if it exists")
@_cache
def cache_export(ref: str, dest: str, force: bool, cache_dir: str | None) -> None:
    """Copy a cached table to DEST (to move it to another machine of the same fingerprint)."""
    src = _by_fingerprint(ref, cache_dir)
    try:
        t = tables.load_table(src, src.name.removesuffix(tables.TABLE_SUFFIX))
    except tables.TableError as e:
        raise click.ClickException(f"{src}: {e}") from e
    target = Path(dest)
    if not target.parent.is_dir():
        raise click.ClickException(f"{dest}: directory {target.parent} does not exist")
    if target.exists() and not force:
        raise click.ClickException(f"{dest} exists; use --force to replace it")
    tables.write_table_atomic(t, target)
    click.echo(f"exported {t.fingerprint} ({len(t.tasks)} tasks) to {dest}")


@cache.command("import")
@click.argument("src", type=click.Path(exists=True, dir_okay=False))
@click.option("--force", is_flag=True, help="replace an existing table of the same fingerprint")
@click.option(
    "--merge", is_flag=True, help="add SRC's tasks to an existing table of the same fingerprint (SRC's win)"
)
@_cache
def cache_import(src: str, force: bool, merge: bool, cache_dir: str | None) -> None:
    """Validate a table file (the library's schema) and install it in the cache under its fingerprint."""
    if force and merge:
        raise click.UsageError("--force replaces the cached table, --merge adds to it: give one")
    try:
        t = tables.load_table(Path(src))
    except tables.TableError as e:
        raise click.ClickException(f"{src}: {e}") from e
    dest = tables.tables_dir(cache_dir) / (t.fingerprint + tables.TABLE_SUFFIX)
    if dest.exists() and not (force or merge):
        raise click.ClickException(f"{dest} exists; use --merge to add to it or --force to replace it")
    try:
        n = tables.write_table_atomic(t, dest, merge=merge)
    except tables.TableError as e:
        raise click.ClickException(f"{dest}: {e} (replace it with --force)") from e
    click.echo(f"imported {t.fingerprint} ({len(t.tasks)} tasks; {n} in the table) to {dest}")
