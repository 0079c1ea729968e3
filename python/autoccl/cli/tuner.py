from __future__ import annotations

import click


@click.command()
def env() -> None:
    """Print the environment variables that load the autoccl plugin."""
    raise click.ClickException("`autoccl env` is not implemented yet (issue 2)")


@click.command()
def run() -> None:
    """Run a command with the autoccl plugin loaded."""
    raise click.ClickException("`autoccl run` is not implemented yet (issue 2)")


@click.group()
def cache() -> None:
    """Inspect and manage saved tuning tables."""
