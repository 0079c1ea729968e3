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

from autoccl import tables
from autoccl._paths import ArtefactNotFound
from autoccl.cli.channels import ChannelsOrAuto, resolve_nccl_channels
from autoccl.tuner_env import MODES, plugin_env

F = TypeVar("F", bound=Callable[..., Any])

_mode = click.option(
    "--mode",
    type=click.Choice(MODES),
    default="online",
    show_default=True,
    help="What the plugin does: tune online (online; sets AUTOCCL_COORD_ADDR=127.0.0.1:<free port> and "
    "a random AUTOCCL_COORD_TOKEN unless set or under torchrun), change nothing (observe), force rules "
    "(fixed), apply a saved table (table).",
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
_trace = click.option("--trace", default=None, help="path prefix of per-process JSONL traces of every call.")
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


def _build_env(
    mode: str,
    fixed: str | None,
    table: str | None,
    trace: str | None,
    ceiling: int | None,
    cache_dir: str | None,
    nccl_channels: int | str | None = None,
    probe_gpus: int | None = None,
) -> dict[str, str]:
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
        return plugin_env(
            mode,
            fixed=fixed,
            table=str(Path(table).resolve()) if table else None,
            cache_dir=cache_dir,
            trace=trace,
            max_channels=ceiling,
            nccl_channels=nccl_channels,
            extra=extra,
        )
    except (ValueError, ArtefactNotFound) as e:
        raise click.UsageError(str(e)) from e


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
    """Print the variables that load the plugin: eval "$(autoccl env --mode observe)"."""
    for key, value in _build_env(
        mode, fixed, table, trace, channel_ceiling, cache_dir, nccl_channels, probe_gpus
    ).items():
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
    child_env = {
        **os.environ,
        **_build_env(mode, fixed, table, trace, channel_ceiling, cache_dir, nccl_channels, probe_gpus),
    }
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
    paths = tables.cached_tables(cache_dir)
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
            t = tables.load_table(path)
        except tables.TableError as e:
            unreadable.append(f"{path.name}: unreadable ({e}); the plugin ignores it")
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
        console.print(line, style="red", soft_wrap=True)


def _resolve(ref: str, cache_dir: str | None) -> Path:
    path = Path(ref)
    if path.is_file():
        return path
    matches = [p for p in tables.cached_tables(cache_dir) if p.stem.startswith(ref)]
    if len(matches) != 1:
        raise click.UsageError(
            f"{ref!r} matches {len(matches)} cached tables; give a file or a unique prefix"
        )
    return matches[0]


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
    console.print(f"fingerprint {t.fingerprint}  " + " ".join(f"{k}={v}" for k, v in t.meta.items()))
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
@click.option("--yes", is_flag=True, help="do not ask")
@_cache
def cache_clear(ref: str | None, yes: bool, cache_dir: str | None) -> None:
    """Delete one cached table, or all of them."""
    paths = [_resolve(ref, cache_dir)] if ref else tables.cached_tables(cache_dir)
    if not paths:
        click.echo("nothing to clear")
        return
    if not yes:
        click.confirm(f"delete {len(paths)} table(s)?", abort=True)
    for p in paths:
        p.unlink()
    click.echo(f"deleted {len(paths)} table(s)")


@cache.command("export")
@click.argument("ref")
@click.argument("dest", type=click.Path(dir_okay=False))
@_cache
def cache_export(ref: str, dest: str, cache_dir: str | None) -> None:
    """Copy a cached table to DEST (to move it to another machine of the same fingerprint)."""
    src = _resolve(ref, cache_dir)
    try:
        tables.load_table(src)
    except tables.TableError as e:
        raise click.ClickException(f"{src}: {e}") from e
    shutil.copyfile(src, dest)
    click.echo(f"exported {src.stem} to {dest}")


@cache.command("import")
@click.argument("src", type=click.Path(exists=True, dir_okay=False))
@click.option("--force", is_flag=True, help="replace an existing table of the same fingerprint")
@_cache
def cache_import(src: str, force: bool, cache_dir: str | None) -> None:
    """Validate a table file and install it in the cache under its fingerprint."""
    try:
        t = tables.load_table(Path(src))
    except tables.TableError as e:
        raise click.ClickException(f"{src}: {e}") from e
    dest = tables.tables_dir(cache_dir) / (t.fingerprint + tables.TABLE_SUFFIX)
    if dest.exists() and not force:
        raise click.ClickException(f"{dest} exists; use --force to replace it")
    tables.write_table_atomic(t, dest)
    click.echo(f"imported {t.fingerprint} ({len(t.tasks)} tasks) to {dest}")
