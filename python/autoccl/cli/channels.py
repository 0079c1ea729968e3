"""The channels of a job's communicators, shared by `autoccl env|run` and `autoccl bench` (its online runs):
`--channel-ceiling`, `--nccl-channels N|auto` and online mode's default."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from autoccl import nccl_probe


class ChannelsOrAuto(click.ParamType):
    """A channel count 1..64, or `auto` (ask NCCL for a plain communicator's count on this host)."""

    name = "N|auto"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if value == "auto":
            return value
        try:
            count = int(value)
        except ValueError:
            self.fail(f"{value!r} is neither a channel count nor 'auto'", param, ctx)
        if not 1 <= count <= 64:
            self.fail(f"{count} is not in the range 1..64", param, ctx)
        return count


def resolve_nccl_channels(value: int | str | None, probe_gpus: int | None, option: str) -> int | None:
    """The count to cap NCCL's own choice at: `value` itself, or for `auto` NCCL's count for a plain
    communicator over `probe_gpus` GPUs of this host (all visible ones if None), said on stderr."""
    if not isinstance(value, str):
        return value
    click.echo("autoccl: asking NCCL for a plain communicator's channel count ...", err=True)
    try:
        found = nccl_probe.probe_plain_channels(probe_gpus)
    except nccl_probe.ProbeError as e:
        raise click.ClickException(
            f"{option} auto: {e}\ngive the count instead: {option} N "
            "(NCCL_DEBUG=INFO prints '<N> coll channels' when a communicator is created)"
        ) from e
    click.echo(
        f"autoccl: a plain communicator over {found.ranks} GPUs of this host has {found.channels} "
        f"channels (NCCL {found.nccl_version}, {found.library}): {option} {found.channels}",
        err=True,
    )
    return found.channels


# Online mode creates communicators with this many channels so that the tuner can give a large
# collective more than NCCL's default (2 x H100: 64 channels ran all_gather / reduce_scatter 128 MiB-1 GiB
# 1.19-1.28x and all_reduce 1.08-1.11x faster than NCCL's 24, benchmarks/results/h100x2/), while the calls
# it leaves to NCCL keep a plain communicator's count.
DEFAULT_ONLINE_CEILING = 64


def has_nvidia_driver() -> bool:
    return Path("/proc/driver/nvidia/gpus").is_dir()


def default_ceiling(probe_gpus: int | None, quiet: bool = False) -> tuple[int | None, int | None]:
    """Online mode without --channel-ceiling/--nccl-channels: raise the ceiling and cap NCCL's own calls at
    the count NCCL gives a plain communicator here; where NCCL cannot be asked (no GPU, no NCCL library),
    NCCL's own communicators, said on stderr."""
    if not has_nvidia_driver():  # nothing to ask, nothing to raise
        if not quiet:
            click.echo(
                "autoccl: no NVIDIA driver here, so NCCL's plain channel count cannot be asked; tuning "
                "within NCCL's own channels (where the job runs on GPUs: give --channel-ceiling "
                f"{DEFAULT_ONLINE_CEILING} --nccl-channels N, or run this command there)",
                err=True,
            )
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
    if quiet:
        return DEFAULT_ONLINE_CEILING, found.channels
    click.echo(
        f"autoccl: communicators with {DEFAULT_ONLINE_CEILING} channels; calls left to NCCL keep its "
        f"{found.channels} (a plain communicator over {found.ranks} GPUs here; "
        "--channel-ceiling 0: NCCL's own)",
        err=True,
    )
    return DEFAULT_ONLINE_CEILING, found.channels


def communicator_channels(
    online: bool,
    ceiling: int | None,
    nccl_channels: int | str | None,
    probe_gpus: int | None,
    table_channels: int = 0,
) -> tuple[int | None, int | None]:
    """(channel ceiling, cap on NCCL's own calls) of a job's communicators from --channel-ceiling and
    --nccl-channels: online mode with neither gets `default_ceiling`, with --nccl-channels alone its ceiling
    over that count; so does a job that reads tables
    (`table_channels`: the most channels they pin) when one pins more channels than a plain communicator
    has, since on a plain one such an entry is clamped to a configuration nobody measured (2 x H200:
    all_gather 128 MiB 0.92x of NCCL); ceiling 0 is NCCL's own communicators (the tuner chooses within
    NCCL's channel count); `auto` is asked of NCCL here."""
    if online and ceiling is None and nccl_channels is None:
        ceiling, nccl_channels = default_ceiling(probe_gpus)
    elif online and ceiling is None:
        # the plain count given (or asked) without a ceiling: still online mode's default communicators, as
        # the count is what the default would have asked NCCL (alone it left plain communicators, where a
        # cap at the plain count does nothing, without a word)
        cap = resolve_nccl_channels(nccl_channels, probe_gpus, "--nccl-channels")
        if cap is None or cap >= DEFAULT_ONLINE_CEILING:
            return None, cap
        click.echo(
            f"autoccl: communicators with {DEFAULT_ONLINE_CEILING} channels (online mode's default); calls "
            f"left to NCCL keep {cap} (--channel-ceiling 0: NCCL's own)",
            err=True,
        )
        return DEFAULT_ONLINE_CEILING, cap
    elif table_channels > 0 and ceiling is None and nccl_channels is None:
        ceiling, nccl_channels = default_ceiling(probe_gpus, quiet=True)
        if ceiling is not None and nccl_channels is not None and table_channels <= nccl_channels:
            return None, None  # every pin fits a plain communicator
        if ceiling is not None:
            click.echo(
                f"autoccl: the table pins up to {table_channels} channels: communicators with {ceiling}, "
                f"calls left to NCCL keep its {nccl_channels} (--channel-ceiling 0: NCCL's own)",
                err=True,
            )
    elif ceiling == 0:
        ceiling = None
    return ceiling, resolve_nccl_channels(nccl_channels, probe_gpus, "--nccl-channels")
