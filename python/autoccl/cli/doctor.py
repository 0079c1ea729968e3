"""`autoccl doctor`: is the plugin picked up, and will it work with this NCCL? (the checks: autoccl.doctor)"""

from __future__ import annotations

import os

import click
from rich.table import Table as RichTable
from rich.text import Text

from autoccl import doctor as D
from autoccl import jsonout
from autoccl.cli import options as O
from autoccl.cli.files import report_console
from autoccl.tuner_env import MODES

_STYLE = {D.OK: "green", D.WARN: "yellow", D.FAIL: "bold red", D.SKIPPED: "dim"}


@click.command()
@click.option("--json", "as_json", is_flag=True, help="print the report as JSON (stdout) instead of a table.")
@click.option(
    "--no-gpu-check",
    is_flag=True,
    help="do not create the check communicator (the last check: NCCL loads the plugin on this host's GPUs).",
)
@click.option(
    "--mode",
    type=click.Choice(list(MODES)),
    default=None,
    help="check as `autoccl run --mode MODE` would run the job [default: AUTOCCL_MODE where set, else "
    "online].",
)
@O.cache_dir
def doctor(as_json: bool, no_gpu_check: bool, mode: str | None, cache_dir: str | None) -> None:
    """Check that the plugin will be picked up and works with this NCCL, before running a job.

    The plugin library `autoccl run|env` would load, the NCCL the job loads (its version and the tuner and
    profiler interfaces it takes from the plugin), the CTA (channel) controls that NCCL and PyTorch offer the
    application (docs/cta-controls.md), the AUTOCCL_* settings, the GPUs, the NVLink multicast
    variables, the table cache; with a GPU and NCCL here, one communicator created with the plugin loaded
    (mode off: nothing applied), from whose log NCCL says what it took. Exit 1 when a check failed."""
    options = D.DoctorOptions(mode=mode, cache_dir=cache_dir, gpu_check=not no_gpu_check)
    checks = D.run_checks(options)
    job_mode = D.job_mode(options, os.environ)
    failed = any(c.status == D.FAIL for c in checks)
    if as_json:
        click.echo(jsonout.dumps(D.report(checks, job_mode), indent=1))
    else:
        _print_table(checks, job_mode)
    if failed:
        click.get_current_context().exit(1)


def _print_table(checks: list[D.Check], mode: str) -> None:
    console = report_console()
    view = RichTable(title=f"autoccl doctor (checks for --mode {mode})", show_lines=True)
    view.add_column("check", no_wrap=True)
    view.add_column("status", no_wrap=True)
    view.add_column("detail", overflow="fold")  # a path too long for the terminal wraps, never "…"
    for c in checks:
        detail = Text(c.detail)
        if c.fix:
            detail.append("\n→ " + c.fix, style="italic")
        view.add_row(Text(c.title), Text(c.status, style=_STYLE[c.status]), detail)
    console.print(view)
    counts = {s: sum(c.status == s for c in checks) for s in D.STATUSES}
    summary = ", ".join(f"{n} {s}" for s, n in counts.items() if n)
    verdict = "a check failed" if counts[D.FAIL] else "nothing failed"
    console.print(Text(f"{summary}: {verdict}"))
