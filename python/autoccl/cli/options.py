"""The options several verbs share, spelled once: `autoccl env|run` (the job's plugin) and `autoccl bench`
(its online runs) take the same communicator options under the same names."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar, cast

import click

from autoccl import settings
from autoccl.cli.channels import ChannelsOrAuto
from autoccl.folders import unwritable_folder
from autoccl.sizes import parse_size
from autoccl.tuner_env import MODES

F = TypeVar("F", bound=Callable[..., Any])


def stack(*options: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator of several options, applied in the order given (as if written above each other)."""

    def apply(command: F) -> F:
        for option in reversed(options):
            command = option(command)
        return command

    return apply


def choice(
    *names: str, values: Sequence[str], default: str, help: str = "", envvar: str | None = None
) -> Callable[[F], F]:
    """An option taking one of `values`, its default shown in --help: every such option of the CLI spelled
    alike. With `envvar`, that variable, where set, is the default."""
    return click.option(
        *names,
        cls=_SettingDefault if envvar else click.Option,
        type=click.Choice(list(values)),
        default=default,
        show_default=True,
        envvar=envvar,
        show_envvar=envvar is not None,
        help=help,
    )


class _SettingDefault(click.Option):
    """An option whose default is an AUTOCCL_* setting, read as the library reads it: ASCII blanks trimmed,
    blank as unset (`AUTOCCL_MODE=' table'` was 'not one of ...', a blank one no mode at all)."""

    def resolve_envvar_value(self, ctx: click.Context) -> str | None:
        raw = super().resolve_envvar_value(ctx)
        value = settings.value_of("value", {"value": raw}) or None if raw is not None else None
        if value is not None and self.envvar and isinstance(self.type, click.Choice):
            if value not in self.type.choices:  # a setting, refused as every other one: one sentence, exit 1
                why = settings.problems({str(self.envvar): value}, readers=("library", "cli"))
                raise click.ClickException(why[0] if why else f"{self.envvar}={value!r} is not valid")
        return value


def gathered(into: str, build: Callable[..., Any], *options: Callable[[Any], Any]) -> Callable[[F], F]:
    """`options` handed to the command as one argument, `into` = build(**their values), instead of one
    parameter each: verbs that share a group of options share one signature for it."""
    probe: Any = stack(*options)(lambda: None)
    names = [p.name for p in getattr(probe, "__click_params__", []) if p.expose_value]

    def decorate(command: F) -> F:
        @functools.wraps(command)
        def with_group(**kwargs: Any) -> Any:
            group = build(**{name: kwargs.pop(name) for name in names})
            return command(**{into: group}, **kwargs)

        return cast(F, stack(*options)(with_group))

    return decorate


def _with_deprecated_alias(
    option: Callable[..., Any], old: str, new: str, dest: str, **kwargs: Any
) -> Callable[[F], F]:
    """Option `new` that also answers to `old`, hidden from --help with a note on stderr. Whichever of the
    two click processes first, the value given reaches `dest`."""

    def from_alias(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value is None:
            return
        click.echo(f"autoccl: {old} is now {new}", err=True)
        ctx.meta[f"alias:{dest}"] = value
        if ctx.params.get(dest) is None:
            ctx.params[dest] = value

    def or_alias(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        return value if value is not None else ctx.meta.get(f"alias:{dest}")

    alias = click.option(
        old, hidden=True, expose_value=False, callback=from_alias, type=kwargs["type"], default=None
    )
    return stack(option(new, dest, callback=or_alias, **kwargs), alias)


def _renamed(new: str, dest: str, old: str, scope: str, **kwargs: Any) -> Callable[[F], F]:
    """Option `new`; where `scope` is given (bench's online modes), `old` is its hidden earlier name."""
    if not scope:
        return click.option(new, dest, **kwargs)
    return _with_deprecated_alias(click.option, old, new, dest, **kwargs)


def channel_ceiling(scope: str = "") -> Callable[[F], F]:
    """`--channel-ceiling N`: communicators with N channels (NCCL_MIN_CTAS=NCCL_MAX_CTAS). `scope` says which
    runs it applies to (bench: the online modes', where `--online-channel-ceiling` was its earlier name)."""
    return _renamed(
        "--channel-ceiling",
        "channel_ceiling",
        "--online-channel-ceiling",
        scope,
        type=click.IntRange(0, 64),
        default=None,
        help=f"{scope}create communicators with this many channels (NCCL_MIN_CTAS=NCCL_MAX_CTAS) so the "
        "tuner can use more than NCCL's default; changes NCCL's own default too. Online mode's default: 64, "
        "with NCCL's own calls capped at a plain communicator's count (asked of NCCL here); 0: NCCL's own.",
    )


def nccl_channels(scope: str = "") -> Callable[[F], F]:
    """`--nccl-channels N|auto`: the cap on the calls the plugin leaves to NCCL (bench: its online modes',
    where `--online-nccl-channels` was its earlier name)."""
    return _renamed(
        "--nccl-channels",
        "nccl_channels",
        "--online-nccl-channels",
        scope,
        type=ChannelsOrAuto(),
        default=None,
        help=f"{scope}at most this many channels for every call whose channel count the plugin leaves to "
        "NCCL. With --channel-ceiling, give the count NCCL creates without it (24 on 2 or 4 x H200), or "
        "'auto': NCCL creates one plain communicator over this host's GPUs first and says its count. NCCL's "
        "own choice then runs as on a plain communicator instead of on all the ceiling's channels (slower "
        "at 1-2 MiB). Without --channel-ceiling, online modes take their default ceiling (64) over this "
        "count (--channel-ceiling 0: NCCL's own communicators). Every rank of a job must get the same "
        "count: on several hosts that are not identical machines, give the number.",
    )


class _Folder(click.Path):
    """A folder to write into; an empty name (`-o ""`, an unset shell variable) is refused: as a path it is
    the current folder, which would take the results without being asked."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("an empty name; give a folder (. for the current one)", param, ctx)
        folder = super().convert(value, param, ctx)
        name = os.fsdecode(folder)
        why = unwritable_folder(name)  # refused before any work, not when the first result is written
        if why:
            self.fail(f"cannot write results in {name}: {why}", param, ctx)
        return folder


def output_folder(dest: str, help: str, **kwargs: Any) -> Callable[[F], F]:
    """`-o/--output DIR`: where a verb writes its results."""
    return click.option(
        "-o", "--output", dest, type=_Folder(file_okay=False, path_type=Path), help=help, **kwargs
    )


probe_gpus = click.option(
    "--probe-gpus",
    type=click.IntRange(2, 64),
    default=None,
    help="GPUs the communicator spans that asks NCCL for a plain communicator's channel count "
    "(--nccl-channels auto, or online and table mode's default channels; default: every visible GPU; give "
    "the job's GPUs per host if it uses fewer).",
)


def _home_expanded(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A leading '~' as the user's home: `--cache-dir=~/c` reaches us unexpanded (no shell expands it after
    '='), and every verb must name the one folder `autoccl run` gives the job."""
    return str(Path(value).expanduser()) if value else value


cache_dir = click.option(
    "--cache-dir", default=None, callback=_home_expanded, help="tuning-table cache directory."
)
# AUTOCCL_MODE, where exported (`eval "$(autoccl env --mode table)"`), is the default: `autoccl run` replaced
# it with online without a word
mode = choice(
    "--mode",
    values=MODES,
    default="online",
    envvar="AUTOCCL_MODE",
    help="What the plugin does: tune online (online), change nothing but the channel options given "
    "(observe), force rules (fixed), apply "
    "a saved table (table; the step guard checks it against NCCL's choices on the training step unless "
    "AUTOCCL_GUARD=off), the resource-sharing study's fixed channel policy, a baseline (manual: "
    "AUTOCCL_MANUAL_CHANNELS), nothing at all, plugin loaded (off). Online and guarded table mode, every "
    "rank meets at one coordinator: the launcher's (torchrun, srun), else the one `autoccl run` gives its "
    "job (AUTOCCL_RUN_ADDR); docs/architecture.md.",
)
fixed = click.option(
    "--fixed",
    "fixed",
    default=None,
    help="fixed-mode rules, e.g. 'allreduce@1M-64M:ring/ll128/16;*:ring/simple'.",
)
table = click.option(
    "--table",
    "table",
    type=click.Path(dir_okay=False),
    default=None,
    help="table file for table mode (default: the cache entry of this machine's fingerprint).",
)
trace = click.option(
    "--trace",
    default=None,
    help="path prefix of per-process JSONL traces of every call (its directory must exist).",
)
progress = click.option(
    "--progress/--no-progress", default=None, help="progress bars [default: on a terminal]"
)


def picture_path(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """Callback of a picture option (--plot, --heatmap, --timeline): a file name whose extension matplotlib
    writes, checked before any work (matplotlib would refuse it only at the end, and without an extension
    would write another file, NAME.png)."""
    if not value:
        return value
    from matplotlib.backend_bases import FigureCanvasBase

    formats = sorted(FigureCanvasBase.get_supported_filetypes())
    ext = Path(value).suffix.lower().removeprefix(".")
    if ext not in formats:
        what = f"format '{ext}' is not supported" if ext else "it has no file extension"
        raise click.BadParameter(
            f"{value}: {what}; give one of .{', .'.join(formats)} (the extension picks the format)"
        )
    return value


class Bytes(click.ParamType):
    """A size in bytes with binary units (64K, 1.5M, 1G; autoccl.synth.parse_size): finite, a whole number of
    bytes, at least one, and at most `most` when given, `above` saying that limit and its reason (a larger
    size "is above {above}"). `many`: a comma-separated list of such sizes, empty items skipped, at least one
    unless `empty`. The value is an int, or a list of them."""

    def __init__(
        self, *, many: bool = False, empty: bool = False, most: float | None = None, above: str = ""
    ) -> None:
        if most is not None and not above:
            raise ValueError("Bytes(most=...) needs `above`: the limit and its reason, for the message")
        self.many, self.empty, self.most, self.above = many, empty, most, above
        self.name = "sizes" if many else "size"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, list | int):  # converted already (a default given as the value)
            return value
        out: list[int] = []
        for item in str(value).split(",") if self.many else [str(value)]:
            text = item.strip()
            if self.many and not text:
                continue
            try:
                size = parse_size(text)  # positive and finite, or a sentence naming the text
            except ValueError as e:
                self.fail(str(e), param, ctx)
            if size < 1:
                self.fail(f"{text!r} is less than one byte", param, ctx)
            if self.most is not None and size > self.most:
                self.fail(f"{text!r} is above {self.above}", param, ctx)
            if size != int(size):
                bytes_ = "" if f"{size:g}" == text else f" ({size:g} bytes)"
                self.fail(f"{text!r} is not a whole number of bytes{bytes_}", param, ctx)
            out.append(int(size))
        if not out and not self.empty:  # only a list can be left empty: '' is a bad size
            self.fail("give at least one size, e.g. 64K,1M", param, ctx)
        return out if self.many else out[0]
