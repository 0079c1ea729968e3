"""The `autoccl` command line. Each command group lives in the module of the component it drives."""

from __future__ import annotations

import click

from autoccl import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autoccl")
def main() -> None:
    """autoccl: make NCCL collectives faster without touching model code."""


def _register() -> None:
    from autoccl.bench.cli import bench, report
    from autoccl.cli.demo import demo
    from autoccl.cli.tuner import cache, env, run
    from autoccl.synth.cli import sim, synth

    for command in (env, run, cache, demo, bench, report, synth, sim):
        main.add_command(command)


_register()
