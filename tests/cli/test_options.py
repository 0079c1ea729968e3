"""The options several verbs share: one spelling, the earlier names of bench's still accepted (hidden)."""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from autoccl.cli import main
from autoccl.cli import options as O


@click.command()
@O.channel_ceiling("online modes: ")
@O.nccl_channels("online modes: ")
def _bench_like(channel_ceiling: int | None, nccl_channels: int | str | None) -> None:
    click.echo(f"{channel_ceiling} {nccl_channels}")


@pytest.mark.parametrize(
    ("args", "values"),
    [
        ([], "None None"),
        (["--channel-ceiling", "32", "--nccl-channels", "12"], "32 12"),
        (["--online-channel-ceiling", "32"], "32 None"),
        (["--online-nccl-channels", "auto", "--online-channel-ceiling", "8"], "8 auto"),
        (["--nccl-channels", "24", "--online-channel-ceiling", "64"], "64 24"),
    ],
)
def test_earlier_names_reach_the_same_parameter(args: list[str], values: str) -> None:
    r = CliRunner().invoke(_bench_like, args)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == values
    for old in ("--online-channel-ceiling", "--online-nccl-channels"):
        assert (old in args) == (f"{old} is now" in r.stderr)


def test_earlier_names_are_checked_and_hidden() -> None:
    r = CliRunner().invoke(_bench_like, ["--online-channel-ceiling", "65"])
    assert r.exit_code == 2 and "--online-channel-ceiling" in r.output
    assert "--online" not in CliRunner().invoke(_bench_like, ["--help"]).output


@pytest.mark.parametrize("verb", [["run"], ["env"], ["bench", "coll"], ["bench", "train"]])
def test_one_spelling_across_verbs(verb: list[str]) -> None:
    text = CliRunner().invoke(main, [*verb, "--help"]).output
    assert "--channel-ceiling" in text and "--nccl-channels" in text
    assert "--online-channel-ceiling" not in text and "--online-nccl-channels" not in text
