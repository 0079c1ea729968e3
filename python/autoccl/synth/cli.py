from __future__ import annotations

import click


@click.command()
def synth() -> None:
    """Synthesize a collective schedule for a topology."""
    raise click.ClickException("`autoccl synth` is not implemented yet (issue 5)")


@click.command()
def sim() -> None:
    """Simulate a schedule or a baseline algorithm on a topology."""
    raise click.ClickException("`autoccl sim` is not implemented yet (issue 5)")
