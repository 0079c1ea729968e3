from __future__ import annotations

import click


@click.command()
def demo() -> None:
    """Online tuning on a simulated 4 x H200 cluster (the real library in the NCCL emulator)."""
    raise click.ClickException("`autoccl demo` is not implemented yet (issue 3: online search)")
