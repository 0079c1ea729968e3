"""`--nccl-channels N|auto`, shared by `autoccl env|run` and `autoccl bench` (the online runs' cap)."""

from __future__ import annotations

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
