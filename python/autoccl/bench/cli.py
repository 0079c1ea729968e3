from __future__ import annotations

import click


@click.group()
def bench() -> None:
    """Benchmarks: `coll` (collectives) and `train` (a training step)."""


@click.command()
def report() -> None:
    """Draw plots and tables from stored benchmark results."""
    raise click.ClickException("`autoccl report` is not implemented yet (issue 4)")
