"""The `autoccl` command line, all of it in this package: one module per command group (tuner: env, run,
cache; bench: bench, report; synth: synth, sim; demo; adaptive: topo, profile, adaptive), the options they
share in options.py and channels.py. The components it drives (autoccl.bench, autoccl.synth, autoccl.demo,
autoccl.adaptive, ...) never import it."""

from __future__ import annotations

import os
import select
import sys
from pathlib import Path
from typing import Any

import click

from autoccl import __version__


def describe_os_error(e: OSError) -> str:
    """One sentence for a file-system error: what, where, why."""
    where = f" {e.filename}" if e.filename else ""
    also = f" -> {e.filename2}" if getattr(e, "filename2", None) else ""
    return f"cannot access{where}{also}: {e.strerror or e}"


def file_in_the_way(path: str | Path) -> str | None:
    """Why no folder can be made for `path`: the nearest existing one above it is a file, or a directory this
    process cannot write in (a read-only mount, no permission). Else None."""
    parent = Path(path).expanduser().resolve().parent
    for folder in (parent, *parent.parents):
        if folder.exists():
            if not folder.is_dir():
                return f"{folder} is a file, not a directory"
            return None if os.access(folder, os.W_OK | os.X_OK) else f"directory {folder} is not writable"
    return None


def missing_parent(path: str | Path) -> str | None:
    """Why `path` cannot be created in its folder (the folder is missing, or is a file), else None."""
    parent = Path(path).expanduser().resolve().parent
    return file_in_the_way(path) or (None if parent.is_dir() else f"directory {parent} does not exist")


def refuse_unwritable(*paths: str | None, folders_made: bool = False) -> None:
    """Refuse, before any work, outputs whose directory does not exist, is a file or cannot be written in;
    with `folders_made` (the command makes missing folders itself), only those under a file or an unwritable
    folder."""
    check = file_in_the_way if folders_made else missing_parent
    for p in paths:
        why = check(p) if p else None
        if why:
            raise click.ClickException(f"cannot write {p}: {why}")


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reading end was closed (poll reports an error on its writing end)."""
    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & (select.POLLERR | select.POLLHUP) for _, ev in poller.poll(0))
    except (OSError, ValueError, AttributeError):  # no file descriptor behind stdout (tests), no poll
        return False


def drop_stdout() -> None:
    """Point stdout at /dev/null so that Python's own flush at exit does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind stdout (tests)
        pass


class _Main(click.Group):
    """Every verb's file-system error (a missing directory, a file where a folder should be, no
    permission) is one sentence and exit 1, never a traceback; Ctrl-C is exit 130; a reader of stdout
    that went away (`autoccl cache list | head -1`) ends the command quietly with 141, as SIGPIPE ends a
    shell tool."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError as e:
            if not _stdout_reader_gone():  # a pipe to a child or a socket: an error like any other
                raise click.ClickException(describe_os_error(e)) from None
            drop_stdout()
            sys.exit(141)
        except OSError as e:
            raise click.ClickException(describe_os_error(e)) from None
        except KeyboardInterrupt:
            click.echo("autoccl: interrupted", err=True)
            sys.exit(130)


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autoccl")
def main() -> None:
    """autoccl: make NCCL collectives faster without touching model code."""


def _register() -> None:
    from autoccl.cli.adaptive import adaptive, profile, topo
    from autoccl.cli.bench import bench, report
    from autoccl.cli.demo import demo
    from autoccl.cli.synth import sim, synth
    from autoccl.cli.tuner import cache, env, run

    for command in (env, run, cache, demo, bench, report, synth, sim, topo, profile, adaptive):
        main.add_command(command)


_register()
