"""The file and stdout handling every command shares: one sentence for a file-system error, outputs refused
before any work when they cannot be written, a reader of stdout that went away (`autoccl demo | head -1`)."""

from __future__ import annotations

import os
import select
import sys
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from autoccl.folders import unwritable_folder

if TYPE_CHECKING:
    from rich.console import Console


def describe_os_error(e: OSError) -> str:
    """One sentence for a file-system error: what, where, why."""
    where = f" {e.filename}" if e.filename else ""
    also = f" -> {e.filename2}" if getattr(e, "filename2", None) else ""
    return f"cannot access{where}{also}: {e.strerror or e}"


def file_in_the_way(path: str | Path) -> str | None:
    """Why no folder can be made for `path`: the nearest existing one above it is a file, or a directory this
    process cannot write in (a read-only mount, no permission). Else None."""
    return unwritable_folder(Path(path).expanduser().resolve().parent)


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


def refuse_same_file(*outputs: tuple[str, str | None]) -> None:
    """Refuse, before any work, two outputs (option, path) that name one file: only the last one written would
    be left, under both names."""
    seen: dict[Path, str] = {}
    for option, path in outputs:
        if not path:
            continue
        key = Path(path).expanduser().resolve()
        if key in seen:
            raise click.UsageError(f"{seen[key]} and {option} name the same file, {path}")
        seen[key] = option


def stdout_reader_gone() -> bool:
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


_stdout_lost = False


def stdout_lost() -> bool:
    """Whether a PipeSafeConsole found stdout's reader gone during this command."""
    return _stdout_lost


def pipe_safe_console(**kwargs: Any) -> Console:
    """A Rich console that, when the reader of stdout goes away, goes quiet and lets the command finish (a
    demo still writes its result files) instead of Rich's exit 1 on the spot; the command then ends with
    141, as SIGPIPE ends a shell tool (`_Main.invoke`). Rich is imported here, not when the CLI starts."""
    return _pipe_safe_class()(**kwargs)


def report_console() -> Console:
    """A pipe-safe console for tables: a terminal's own width; piped or redirected, wide enough that no
    column is cut to an ellipsis (Rich falls back to 80 columns there, and a demo's or a doctor's numbers and
    paths ended in "…" in logs), unless COLUMNS says how wide."""
    console = pipe_safe_console()
    # the stream's own, not Rich's is_terminal, which FORCE_COLOR (CI logs) turns on
    if os.environ.get("COLUMNS") or (hasattr(console.file, "isatty") and console.file.isatty()):
        return console
    return pipe_safe_console(width=max(console.width, 240))


@cache
def _pipe_safe_class() -> type[Console]:
    from rich.console import Console

    class PipeSafeConsole(Console):
        def on_broken_pipe(self) -> None:
            global _stdout_lost
            if not stdout_reader_gone():  # a pipe to a child or a socket: an error like any other
                raise BrokenPipeError("stdout's pipe broke")
            _stdout_lost = True
            self.quiet = True
            drop_stdout()

    return PipeSafeConsole
