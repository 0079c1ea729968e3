"""`autoccl env`, `autoccl run`, `autoccl cache`: load the plugin into any NCCL program, manage tables."""

from __future__ import annotations

import difflib
import errno
import os
import shlex
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import click
from rich.table import Table as RichTable

from autoccl import settings, tables
from autoccl._paths import ArtefactNotFound
from autoccl.cli import options as O
from autoccl.cli.channels import communicator_channels
from autoccl.cli.files import missing_parent, report_console
from autoccl.folders import unwritable_folder
from autoccl.tuner_env import (
    COORDINATED_MODES,
    MODES,
    MPI_LAUNCHERS,
    SAFETY_ENV,
    mpi_forwarding,
    plugin_env,
    this_host_address,
)


@dataclass(frozen=True)
class PluginOptions:
    """What `autoccl env` and `autoccl run` are told about the plugin's job (one option each)."""

    mode: str
    fixed: str | None
    table: str | None
    trace: str | None
    channel_ceiling: int | None
    nccl_channels: int | str | None
    probe_gpus: int | None
    cache_dir: str | None


# The options that build the plugin environment, shared by `env` and `run`, handed over as one PluginOptions.
_plugin_options = O.gathered(
    "plugin",
    PluginOptions,
    O.mode,
    O.fixed,
    O.table,
    O.trace,
    O.channel_ceiling(),
    O.nccl_channels(),
    O.probe_gpus,
    O.cache_dir,
)


def _check_table_option(mode: str, table: str | None) -> tuple[str | None, tables.Table | None]:
    """--table as an absolute path; in table mode it must be a valid table (the library's schema), and is
    returned read."""
    if not table:
        return None, None
    path = Path(table).expanduser().resolve()
    if mode != "table":
        return str(path), None
    try:
        return str(path), tables.load_table(path)
    except tables.TableError as e:
        raise click.ClickException(f"--table {table}: {e}") from None


def _pinned_channels(given: tables.Table | None, cache_dir: str | None) -> int:
    """The most channels an entry pins in the tables a table-mode job reads (--table, else the cache's);
    unreadable cached tables count 0 here (the library reports them). Without --table the job reads the
    cache's entry of its machine fingerprint, which only the library knows; an empty cache is known here, and
    a job on it would run NCCL's choices without a word: said on stderr."""
    read = [given] if given else []
    if not given:
        override = str(Path(cache_dir).expanduser()) if cache_dir else None
        try:
            paths = tables.cached_tables(override)
        except tables.TableError:
            return 0
        if not paths:
            click.echo(
                f"autoccl: no tables in {tables.tables_dir(override)}: table mode applies nothing until "
                "one exists for this machine (run the job once with --mode online, or `autoccl cache import "
                "FILE`)",
                err=True,
            )
        for path in paths:
            try:
                read.append(tables.load_table(path))
            except tables.TableError:
                continue
    return max([0, *(int(t.get("channels", "0")) for table in read for t in table.tasks)])


def _checked_options(
    plugin: PluginOptions, base: Mapping[str, str]
) -> tuple[str | None, tables.Table | None]:
    """The checks of a job's options that start nothing and ask no GPU: the AUTOCCL_* variables of BASE (what
    the user exported, before it reaches a job), --fixed's rules, the options that apply to one mode only, and
    --table (`_check_table_option`: returned as it), or in table mode an exported AUTOCCL_TABLE (returned
    read; the path is already the job's)."""
    try:
        settings.check(base, readers=("library", "cli"))
    except settings.SettingError as e:
        raise click.ClickException(str(e)) from None
    mode, fixed, table = plugin.mode, plugin.fixed, plugin.table
    if fixed is not None:
        why = settings.fixed_rules_problem(fixed, plugin.channel_ceiling or 64)
        if why:
            raise click.UsageError("--fixed: " + why.removeprefix("AUTOCCL_FIXED "))
    if mode != "fixed" and fixed is not None:
        raise click.UsageError(f"--fixed applies to --mode fixed, not {mode}")
    if mode not in ("table", "observe") and table is not None:
        raise click.UsageError(f"--table applies to --mode table or observe, not {mode}")
    if plugin.probe_gpus is not None and not _asks_nccl(plugin):
        raise click.UsageError(
            "--probe-gpus applies to --nccl-channels auto, or to mode online or table without "
            "--channel-ceiling and --nccl-channels (their default channels ask NCCL); nothing is asked here"
        )
    exported = settings.value_of("AUTOCCL_TABLE", base)
    if table is None and exported and mode == "table":
        # the library's table in this mode (docs/architecture.md): checked, and its pins counted, as --table's
        try:
            return None, tables.load_table(Path(exported))
        except tables.TableError as e:
            raise click.ClickException(f"AUTOCCL_TABLE={exported}: {e}") from None
    return _check_table_option(mode, table)


def _asks_nccl(plugin: PluginOptions) -> bool:
    """Whether the job's channels may be asked of NCCL over --probe-gpus GPUs (`communicator_channels`)."""
    defaults = plugin.channel_ceiling is None and plugin.nccl_channels is None
    return plugin.nccl_channels == "auto" or (defaults and plugin.mode in ("online", "table"))


def run_options_problem(args: Sequence[str], base: Mapping[str, str]) -> str | None:
    """Why `autoccl run ARGS -- COMMAND` in environment BASE would refuse to start COMMAND, as one sentence
    (None: it would start it), found without starting anything or asking a GPU: the options as `run` parses
    them, their checks, and the plugin's variables on top of BASE as the library would read them. Checks the
    arguments a benchmark hands to many launches before the first one."""
    if not any(a == "--mode" or a.startswith("--mode=") for a in args):
        # run's default is AUTOCCL_MODE where set: BASE's, which the launch gets, not this process's
        # (an invalid one is left to the settings check, which names it in its own words)
        exported = settings.value_of("AUTOCCL_MODE", base)
        args = ["--mode", exported if exported in MODES else "online", *args]
    try:
        ctx = run.make_context("autoccl run", [*args, "--", "true"])
    except click.ClickException as e:
        return e.format_message()
    stray = list(ctx.params.pop("command"))[:-1]
    if stray:
        what = "option" if stray[0].startswith("-") else "argument"
        return f"no such {what} of autoccl run: {stray[0]}"
    plugin = PluginOptions(**ctx.params)
    try:
        table, _ = _checked_options(plugin, base)
        env = plugin_env(
            plugin.mode, fixed=plugin.fixed, table=table, cache_dir=plugin.cache_dir, trace=plugin.trace
        )
    except (click.ClickException, ValueError, ArtefactNotFound) as e:
        return e.format_message() if isinstance(e, click.ClickException) else str(e)
    found = settings.problems({**base, **env})
    return found[0] if found else None


def _build_env(plugin: PluginOptions, run_host: str | None = None) -> dict[str, str]:
    """The plugin's variables for a job, checked as the library checks them (and the AUTOCCL_* variables
    already in this environment with them): a value the library would refuse is an error here, before
    anything starts."""
    table, given_table = _checked_options(plugin, os.environ)
    for why in settings.unknown():  # the library ignores them: say so, as the job starts anyway
        click.echo(f"autoccl: {why}; the library ignores it", err=True)
    mode, fixed, trace, cache_dir = plugin.mode, plugin.fixed, plugin.trace, plugin.cache_dir
    if mode == "observe" and (plugin.nccl_channels is not None or plugin.channel_ceiling):
        given = [
            f"{flag} {value}"
            for flag, value in (
                ("--channel-ceiling", plugin.channel_ceiling),
                ("--nccl-channels", plugin.nccl_channels),
            )
            if value is not None and value != 0
        ]
        click.echo(
            f"autoccl: observe mode with {' and '.join(given)}: NCCL's own calls run on the channels these "
            "set, not as without autoccl (observe changes nothing else)",
            err=True,
        )
    extra: dict[str, str] = {}
    ceiling, nccl_channels = communicator_channels(
        mode == "online",
        plugin.channel_ceiling,
        plugin.nccl_channels,
        plugin.probe_gpus,
        table_channels=_pinned_channels(given_table, cache_dir) if mode == "table" else 0,
    )
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
    _say_what_is_replaced(env, fixed or settings.value_of("AUTOCCL_FIXED") if mode == "fixed" else None)
    if mode in ("online", "observe"):  # the job writes a table at its end: where it would land
        observed = ""
        if mode == "observe":  # observe writes into its table file where one is named
            observed = env.get("AUTOCCL_TABLE", "") or settings.value_of("AUTOCCL_TABLE")
        target = Path(observed) if observed else tables.tables_dir(env.get("AUTOCCL_CACHE_DIR")) / "x.table"
        unsaved = unwritable_folder(target.parent)
        if unsaved:  # the library's WARN goes to NCCL's log, unseen without NCCL_DEBUG
            click.echo(
                f"autoccl: {unsaved}: the job cannot save the table mode {mode} writes ({target.parent}); "
                f"give {'--table FILE' if observed else '--cache-dir DIR'} in a writable folder",
                err=True,
            )
    traced = env.get("AUTOCCL_TRACE") or settings.value_of("AUTOCCL_TRACE")
    if traced and Path(traced).is_dir():  # a prefix, not a folder: the files would land beside it
        click.echo(
            f"autoccl: the trace prefix {traced} is a directory: the traces go beside it "
            f"({traced}.<host>.<pid>.jsonl), not into it; for files in it give {traced}/trace",
            err=True,
        )
    return env


def _say_what_is_replaced(env: Mapping[str, str], fixed: str | None) -> None:
    """A value of the user's shell that the job's environment replaces, said on stderr (it was replaced
    without a word: an NCCL Inspector in NCCL_PROFILER_PLUGIN quietly lost), and fixed rules NVLink
    multicast being off leaves to NCCL."""
    for name in ("NCCL_PROFILER_PLUGIN", "NCCL_TUNER_PLUGIN"):
        theirs = os.environ.get(name, "").strip()
        if not theirs or theirs == env.get(name):
            continue
        if name == "NCCL_PROFILER_PLUGIN" and not settings.value_of("AUTOCCL_PROFILER_CHAIN"):
            keep = f"; to run it beside autoccl, chain it: AUTOCCL_PROFILER_CHAIN={theirs}"
        elif name == "NCCL_PROFILER_PLUGIN":
            chained = settings.value_of("AUTOCCL_PROFILER_CHAIN")
            keep = (
                f" (AUTOCCL_PROFILER_CHAIN={chained} is chained)"
                if Path(chained).expanduser().resolve() == Path(theirs).expanduser().resolve()
                else f"; AUTOCCL_PROFILER_CHAIN chains {chained}, not it"
            )
        else:
            keep = ": NCCL loads one tuner per process"
        click.echo(f"autoccl: {name}={theirs} replaced by autoccl's plugin{keep}", err=True)
    for name, value in SAFETY_ENV.items():
        theirs = os.environ.get(name, "").strip()
        if theirs and theirs != value:
            click.echo(
                f"autoccl: {name}={theirs} set to {value}: NVLink multicast stays off in jobs autoccl starts "
                "(it can take a shared host down)",
                err=True,
            )
    nvls = [
        r.strip() for r in (fixed or "").split(";") if r.partition(":")[2].strip().lower().startswith("nvls")
    ]
    if nvls:
        click.echo(
            f"autoccl: --fixed {'; '.join(nvls)}: NVLS is off (NCCL_NVLS_ENABLE=0), so NCCL keeps its own "
            "choice for those calls",
            err=True,
        )


@click.command()
@_plugin_options
@O.choice("--shell", values=["sh", "fish"], default="sh")
def env(plugin: PluginOptions, shell: str) -> None:
    """Print the variables that load the plugin: eval "$(autoccl env --mode observe)".

    In modes online and table no coordinator address is printed (jobs started from one shell must not share
    one): under torchrun and srun the library derives its job's own; start other multi-process jobs with
    `autoccl run`, or export AUTOCCL_COORD_ADDR and AUTOCCL_COORD_TOKEN for each job."""
    variables = _build_env(plugin)
    if plugin.mode in COORDINATED_MODES:
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
def run(plugin: PluginOptions, command: tuple[str, ...]) -> None:
    """Run COMMAND (torchrun, mpirun, srun, nccl-tests, ...) with the plugin loaded.

    Example: autoccl run --mode observe -- torchrun --nproc-per-node 4 train.py
    """
    if command[0].startswith("-"):
        # unknown options reach COMMAND (its own options must pass through): one before any command is a typo
        ctx = click.get_current_context()
        ours = [o for p in ctx.command.params for o in p.opts if o.startswith("--")]
        close = difflib.get_close_matches(command[0].split("=", 1)[0], ours, n=1)
        hint = f" Did you mean {close[0]}?" if close else ""
        raise click.UsageError(f"No such option: {command[0]}.{hint} (autoccl run [OPTIONS] -- COMMAND)")
    # before the environment is built (its channel probe prints a notice): a command that cannot run is the
    # first thing to say
    exe = shutil.which(command[0])
    if exe is None:  # the shell's and env(1)'s statuses: 127 not found, 126 found but not runnable
        why, status = _not_runnable(command[0])
        click.echo(f"Error: {why}", err=True)
        sys.exit(status)
    launcher = Path(command[0]).name
    mpi = launcher in MPI_LAUNCHERS
    run_host = "127.0.0.1"
    if mpi and plugin.mode in COORDINATED_MODES:
        # the ranks mpirun starts on other hosts reach this one's coordinator (the launch host's ranks
        # serve it); without a network the job is on this host alone
        run_host = this_host_address() or "127.0.0.1"
    built = _build_env(plugin, run_host)
    if mpi:
        # the library's settings this shell exports go to remote ranks too: Open MPI passes only the
        # variables it is told, and a rank on another host with other settings is refused by the coordinator
        exported = [k for k, v in settings.BY_NAME.items() if v.reader == "library" and k in os.environ]
        built.update(mpi_forwarding({**dict.fromkeys(exported, ""), **built}, os.environ))
    child_env = {**os.environ, **built}
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(exe, list(command), child_env)
    except OSError as e:  # a script without #!, a binary of another machine: as a shell, 126 (127 if gone)
        click.echo(f"Error: cannot run {command[0]}: {e.strerror or e}", err=True)
        sys.exit(127 if e.errno == errno.ENOENT else 126)


def _not_runnable(command: str) -> tuple[str, int]:
    """Why COMMAND cannot be run, and the status a shell would give: a directory or a file without execute
    permission (126), or nothing of that name (127)."""
    if os.sep in command:
        path = Path(command)
        if path.is_dir():
            return f"{command} is a directory, not a command", 126
        if path.exists():
            return f"{command} is not executable (chmod +x, or name its interpreter first)", 126
    return f"command not found: {command}", 127


@click.group()
def cache() -> None:
    """Inspect and manage saved tuning tables (one per machine fingerprint)."""


@cache.command("list")
@O.cache_dir
def cache_list(cache_dir: str | None) -> None:
    """List cached tables."""
    console = report_console()
    paths = _cached(cache_dir)
    if not paths:
        where = tables.tables_dir(cache_dir)
        gone = "" if where.parent.is_dir() else f" ({where.parent} does not exist)"
        console.print(f"no tables in {where}{gone}")
        return
    view = RichTable(title=str(tables.tables_dir(cache_dir)))
    view.add_column("fingerprint", no_wrap=True, min_width=16)
    for col in ("gpu", "gpus", "ranks", "nodes", "nccl", "tasks", "pairs", "created"):
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
            str(len(t.pairs)),
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
    cached = _cached(cache_dir)
    matches = [p for p in cached if p.name.startswith(ref)]
    if not cached:
        raise click.UsageError(f"no tables in {tables.tables_dir(cache_dir)}: {ref!r} matches none")
    if len(matches) != 1:
        listed = ", ".join(p.name.removesuffix(tables.TABLE_SUFFIX) for p in matches[:5])
        raise click.UsageError(
            f"{ref!r} matches {len(matches)} of the {len(cached)} cached tables in "
            f"{tables.tables_dir(cache_dir)}{': ' + listed if listed else ''}; "
            "give a unique prefix of a fingerprint"
        )
    return matches[0]


def _resolve(ref: str, cache_dir: str | None) -> Path:
    """A table file to read: an existing file, else a cached table by fingerprint prefix."""
    path = Path(ref)
    if ref and path.is_file():
        return path
    if os.sep in ref or ref.endswith(tables.TABLE_SUFFIX):  # meant as a file: say that it is not one
        raise click.UsageError(f"{ref}: no such file" if not path.exists() else f"{ref}: not a regular file")
    return _by_fingerprint(ref, cache_dir)


@cache.command("show")
@click.argument("ref")
@O.cache_dir
def cache_show(ref: str, cache_dir: str | None) -> None:
    """Show one table (a fingerprint prefix or a file)."""
    try:
        t = tables.load_table(_resolve(ref, cache_dir))
    except tables.TableError as e:
        raise click.ClickException(str(e)) from e
    console = report_console()
    console.print(
        f"fingerprint {t.fingerprint}  " + " ".join(f"{k}={v}" for k, v in t.meta.items()), markup=False
    )
    if not t.tasks:  # an empty rich table prints as a blank line
        console.print("no tasks: every collective runs NCCL's own choice under this table", markup=False)
    else:
        view = RichTable()
        keys: list[str] = []
        for task in t.tasks:
            keys += [k for k in task if k not in keys]
        for k in keys:
            view.add_column(k, no_wrap=True)
        for task in t.tasks:
            view.add_row(*(task.get(k, "") for k in keys))
        console.print(view)
    if t.pairs:
        console.print(_pairs_view(t))


# The library's rule for a pair record at the next online start (engine: kPairRecordMinSamples, skipBehind).
PAIR_RECORD_MIN_SAMPLES = 2


def _pairs_view(t: tables.Table) -> RichTable:
    """The table's pair records, each with its ratio to NCCL's choice, the channel count of its best point,
    and what the next online start does with it under this environment's AUTOCCL_SKIP_BEHIND_PCT and
    AUTOCCL_RECORDED_START."""
    name = "AUTOCCL_SKIP_BEHIND_PCT"
    raw = settings.value_of(name)
    bad = settings.problems({name: raw})
    pct = None if bad else int(raw or "100")
    start_name = "AUTOCCL_RECORDED_START"
    start_raw = settings.value_of(start_name)
    start_bad = settings.problems({start_name: start_raw})
    from_record = None if start_bad else start_raw != "off"
    if bad or start_bad:
        rule = f"{(bad or start_bad)[0]}: the library would refuse it (and load no tuner)"
    elif pct == 0:
        rule = f"{name}=0: the next online start probes every pair"
    else:
        rule = (
            f"the next online start skips a pair recorded on {PAIR_RECORD_MIN_SAMPLES} samples or more and "
            f"more than {pct} % slower than NCCL's choice ({name}{'' if raw else ', default'} {pct})"
        )
    if from_record is not None:
        rule += (
            "; it first probes the others at their best point (best at)"
            if from_record
            else f"; {start_name}=off: it first probes the others at the widest channel count"
        )
    view = RichTable(
        title="pairs the online search measured (each pair's best median against NCCL's choice)", caption=rule
    )
    for col in (
        "coll",
        "bytes",
        "pipe",
        "algo",
        "proto",
        "time_us",
        "nccl_us",
        "x NCCL",
        "best at",
        "samples",
        "next start",
    ):
        view.add_column(col, no_wrap=True)
    for p in t.pairs:
        time_us, nccl_us = float(p["time_us"]), float(p["nccl_us"])
        ratio = time_us / nccl_us if nccl_us > 0 else None
        skipped = (
            pct is not None
            and pct > 0
            and ratio is not None
            and int(p.get("samples", "0")) >= PAIR_RECORD_MIN_SAMPLES
            and ratio > 1 + pct / 100
        )
        channels = int(p.get("channels", "0"))
        if pct is None or from_record is None:
            verdict = "?"
        elif skipped:
            verdict = "skipped"
        else:
            verdict = "probed from best" if from_record and channels > 0 else "probed"
        view.add_row(
            p["coll"],
            p["bytes"],
            p.get("pipe", "1"),
            p["algo"],
            p["proto"],
            p["time_us"],
            p["nccl_us"],
            f"{ratio:.2f}" if ratio is not None else "?",
            f"{channels} ch" if channels > 0 else "—",
            p.get("samples", "0"),
            verdict,
        )
    return view


@cache.command("clear")
@click.argument("ref", required=False)
@click.option("--all", "everything", is_flag=True, help="delete every cached table")
@click.option("--yes", is_flag=True, help="do not ask")
@O.cache_dir
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
        try:
            with tables.held(p, _say_wait):
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink(missing_ok=True)
        except tables.TableError as e:
            raise click.ClickException(f"{p}: {e}") from e
    click.echo(f"deleted {len(paths)} table(s)")


def _say_wait(message: str) -> None:
    click.echo(f"autoccl cache: {message}", err=True)


@cache.command("export")
@click.argument("ref")
@click.argument("dest", type=click.Path(dir_okay=False))
@click.option("--force", is_flag=True, help="replace DEST if it exists")
@O.cache_dir
def cache_export(ref: str, dest: str, force: bool, cache_dir: str | None) -> None:
    """Copy a cached table to DEST (to move it to another machine of the same fingerprint)."""
    src = _by_fingerprint(ref, cache_dir)
    try:
        t = tables.load_table(src, src.name.removesuffix(tables.TABLE_SUFFIX))
    except tables.TableError as e:
        raise click.ClickException(f"{src}: {e}") from e
    if dest.endswith(("/", os.sep)):  # a folder: the path would drop the slash and make a file of its name
        folder = dest.rstrip("/" + os.sep)
        raise click.ClickException(f"{dest}: name the file to write, e.g. {folder}/{src.name}")
    # A link is written through (its target replaced, the link kept); a device or a pipe is never replaced by
    # a file (as root, --force over /dev/null made it a regular file).
    target = Path(dest).resolve() if Path(dest).is_symlink() else Path(dest)
    why = missing_parent(target)
    if why:
        raise click.ClickException(f"{dest}: {why}")
    if target.exists() and not target.is_file():
        raise click.ClickException(f"{dest} exists and is not a regular file; name a file to write")
    if target.exists() and not force:
        raise click.ClickException(f"{dest} exists; use --force to replace it")
    try:
        tables.write_table_file(t, target, on_wait=_say_wait)
    except tables.TableError as e:  # a cache's table: its lock held by another process for the whole wait
        raise click.ClickException(f"{dest}: {e}") from e
    click.echo(f"exported {t.fingerprint} ({len(t.tasks)} tasks) to {dest}")


@cache.command("import")
@click.argument("src", type=click.Path(exists=True, dir_okay=False))
@click.option("--force", is_flag=True, help="replace an existing table of the same fingerprint")
@click.option(
    "--merge", is_flag=True, help="add SRC's tasks to an existing table of the same fingerprint (SRC's win)"
)
@O.cache_dir
def cache_import(src: str, force: bool, merge: bool, cache_dir: str | None) -> None:
    """Validate a table file (the library's schema) and install it in the cache under its fingerprint."""
    if force and merge:
        raise click.UsageError("--force replaces the cached table, --merge adds to it: give one")
    try:
        t = tables.load_table(Path(src))
    except tables.TableError as e:
        raise click.ClickException(f"{src}: {e}") from e
    dest = tables.tables_dir(cache_dir) / (t.fingerprint + tables.TABLE_SUFFIX)
    if (dest.exists() or dest.is_symlink()) and not dest.is_file():
        raise click.ClickException(
            f"{dest} exists and is not a table file: remove it (autoccl cache clear {t.fingerprint})"
        )
    if dest.exists() and not (force or merge):
        raise click.ClickException(f"{dest} exists; use --merge to add to it or --force to replace it")
    try:
        n = tables.write_table_atomic(t, dest, merge=merge, on_wait=_say_wait)
    except tables.TableError as e:
        held = "held by another process" in str(e)
        raise click.ClickException(f"{dest}: {e}" + ("" if held else " (replace it with --force)")) from e
    click.echo(f"imported {t.fingerprint} ({len(t.tasks)} tasks; {n} in the table) to {dest}")
