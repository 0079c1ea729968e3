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


@click.command()
@click.option("--size", type=O.Bytes(), default="1G", show_default=True)
@click.option("--sizes", type=O.Bytes(many=True), default=None)
@click.option("--maybe", type=O.Bytes(many=True, empty=True), default="")
@click.option("--capped", type=O.Bytes(most=16 << 30, above="16G, the test's limit"), default=None)
def _sized(size: int, sizes: list[int] | None, maybe: list[int], capped: int | None) -> None:
    click.echo(f"{size} {sizes} {maybe} {capped}")


@pytest.mark.parametrize(
    ("args", "values"),
    [
        ([], "1073741824 None [] None"),
        (["--size", "1.5M", "--sizes", "4K, 64KiB,,1m"], "1572864 [4096, 65536, 1048576] [] None"),
        (["--size", "4096", "--maybe", "8M", "--capped", "16G"], "4096 None [8388608] 17179869184"),
        (["--size", "1024T"], f"{2**50} None [] None"),  # no limit unless one is given
    ],
)
def test_sizes_in_bytes(args: list[str], values: str) -> None:
    """O.Bytes, the byte sizes of synth, sim, demo, profile and adaptive: binary units (synth.parse_size),
    whole bytes as ints, one or a comma-separated list."""
    r = CliRunner().invoke(_sized, args)
    assert r.exit_code == 0, r.output
    assert r.stdout.strip() == values


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--size", "nan"], "Invalid value for '--size': bad size 'nan': not a finite number of bytes"),
        (["--size", "inf"], "Invalid value for '--size': bad size 'inf': not a finite number of bytes"),
        (["--size", "-inf"], "Invalid value for '--size': bad size '-inf': not a finite number of bytes"),
        (["--size", "1e400M"], "bad size '1e400M': not a finite number of bytes"),
        (["--sizes", "1M,nan"], "Invalid value for '--sizes': bad size 'nan': not a finite number of bytes"),
        (["--size", "0"], "size must be positive, got '0'"),
        (["--size", "x"], "bad size 'x' (e.g. 1G, 64M, 4096)"),
        (["--size", ""], "bad size ''"),
        (["--size", "0.5"], "'0.5' is less than one byte"),
        (["--size", "1.5"], "'1.5' is not a whole number of bytes"),
        (["--size", "0.3K"], "'0.3K' is not a whole number of bytes (307.2 bytes)"),
        (["--sizes", " , "], "Invalid value for '--sizes': give at least one size, e.g. 64K,1M"),
        (["--capped", "17G"], "Invalid value for '--capped': '17G' is above 16G, the test's limit"),
        (["--capped", "1e30"], "'1e30' is above 16G"),
    ],
)
def test_bad_sizes_are_one_line(args: list[str], message: str) -> None:
    r = CliRunner().invoke(_sized, args)
    assert r.exit_code == 2 and "Traceback" not in r.output, r.output
    assert message in r.output.strip().splitlines()[-1], r.output


def test_a_limit_needs_its_reason() -> None:
    with pytest.raises(ValueError, match="above"):
        O.Bytes(most=1 << 30)
    assert O.Bytes().name == "size" and O.Bytes(many=True).name == "sizes"
    assert "--size SIZE" in CliRunner().invoke(_sized, ["--help"]).output


@pytest.mark.parametrize(
    "verb",
    [["demo"], ["bench", "nccl-tests"], ["bench", "train-pairs", "x.json"], ["report", "x.json"]],
)
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_output_folder_is_refused(verb: list[str], empty: str) -> None:
    """`-o ""` (an unset shell variable) named the current folder, which took the results unasked."""
    r = CliRunner().invoke(main, [*verb, "-o", empty])
    assert r.exit_code == 2, r.output
    assert "an empty name; give a folder (. for the current one)" in r.output, r.output
