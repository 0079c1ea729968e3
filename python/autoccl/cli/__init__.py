"""The `autoccl` command line, all of it in this package: one module per command group (tuner: env, run,
cache; doctor; bench: bench, report; synth: synth, sim; demo; adaptive: topo, profile, adaptive), the options
they share in options.py and channels.py. The components it drives (autoccl.bench, autoccl.synth,
autoccl.demo, autoccl.adaptive, ...) never import it."""

from __future__ import annotations

import sys
from typing import Any

import click

from autoccl import __version__
from autoccl.cli.files import describe_os_error, drop_stdout, stdout_lost, stdout_reader_gone


class _Main(click.Group):
    """Every verb's file-system error (a missing directory, a file where a folder should be, no
    permission) is one sentence and exit 1, never a traceback; Ctrl-C is exit 130; a reader of stdout
    that went away (`autoccl cache list | head -1`) ends the command quietly with 141, as SIGPIPE ends a
    shell tool."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            result = super().invoke(ctx)
        except BrokenPipeError as e:
            if not stdout_reader_gone():  # a pipe to a child or a socket: an error like any other
                raise click.ClickException(describe_os_error(e)) from None
            drop_stdout()
            sys.exit(141)
        except OSError as e:
            raise click.ClickException(describe_os_error(e)) from None
        except ImportError as e:
            from autoccl.synth._ext import ExtensionNotFound

            if not isinstance(e, ExtensionNotFound):
                raise
            raise click.ClickException(str(e)) from None
        except KeyboardInterrupt:
            click.echo("autoccl: interrupted", err=True)
            sys.exit(130)
        if stdout_lost():  # a console went quiet when stdout's reader left and the command finished its work
            sys.exit(141)
        return result


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="autoccl")
def main() -> None:
    """autoccl: make NCCL collectives faster without touching model code."""


def _register() -> None:
    from autoccl.cli.adaptive import adaptive, profile, topo
    from autoccl.cli.bench import bench, report
    from autoccl.cli.demo import demo
    from autoccl.cli.doctor import doctor
    from autoccl.cli.synth import sim, synth
    from autoccl.cli.tuner import cache, env, run

    for command in (env, run, cache, doctor, demo, bench, report, synth, sim, topo, profile, adaptive):
        main.add_command(command)


_register()
