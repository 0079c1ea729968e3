"""`autoccl demo`: online tuning on a simulated 4 x H200 node (the real library in the NCCL emulator)."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import click

from autoccl import settings
from autoccl.cli import options as O
from autoccl.cli.files import missing_parent, report_console
from autoccl.tuner_env import SAFETY_ENV

# --sizes and --buckets: comma-separated sizes ('' for none), each at most the simulated GPUs' memory.
SIZES = O.Bytes(many=True, empty=True, most=16 << 30, above="16G, the simulated GPUs' memory")


@click.command(context_settings={"show_default": True})
@click.option("--ranks", type=click.IntRange(2, 64), default=4, help="Simulated GPUs (ranks) of the node.")
@click.option(
    "--comms",
    type=click.IntRange(1, 16),
    default=2,
    help="Communicators: 1 = everything on one; 2 = an FSDP group (all-gather/reduce-scatter) and a DDP "
    "group (all-reduce); more = collectives spread round-robin.",
)
@click.option(
    "--sizes", type=SIZES, default="8M,64M,256M", help="FSDP all-gather / reduce-scatter sizes (full buffer)."
)
@click.option("--buckets", type=SIZES, default="25M,4M", help="DDP all-reduce bucket sizes ('' for none).")
@click.option(
    "--steps",
    type=click.IntRange(20, 100000),
    default=240,
    help="Training steps (calls per task). A task's search takes up to about 150 of its calls: with fewer "
    "steps some tasks are still searching at the end (their gain is marked *).",
)
@click.option(
    "--load",
    type=click.FloatRange(0.0, 4.0),
    default=0.35,
    help="Concurrent GEMM load (0 none, 0.35 light, 1 heavy).",
)
@click.option(
    "--seed", type=click.IntRange(0, 2**63 - 1), default=1, help="Emulator seed (noise, event order)."
)
@click.option(
    "--processes/--threads", default=False, help="One process per rank over TCP, or ranks as threads."
)
@O.output_folder(
    "out_dir",
    "Output directory (default: ./autoccl-demo-<time>); refused when it holds an earlier demo.",
    default=None,
    show_default=False,
)
@click.option("--force", is_flag=True, help="Replace the results of an earlier demo in the output directory.")
def demo(
    ranks: int,
    comms: int,
    sizes: list[int],
    buckets: list[int],
    steps: int,
    load: float,
    seed: int,
    processes: bool,
    out_dir: Path | None,
    force: bool,
) -> None:
    """Online tuning on a simulated 4 x H200 node (the real library in the NCCL emulator).

    Runs a training-like mix twice on the emulator, NCCL alone and with autoccl (AUTOCCL_MODE=online),
    and reports per task NCCL's choice, the tuned configuration, their true kernel times and the gain,
    from the emulator's ground truth. Writes tasks.md, results.json and convergence.png. The demo runs with
    the library's and NCCL's defaults: AUTOCCL_* and NCCL_* variables of this shell are not passed to it.
    """
    from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

    from autoccl._paths import ArtefactNotFound
    from autoccl.demo import DemoConfig, DemoUnavailable, run_demo
    from autoccl.demo.report import rich_table, write_all

    cfg = DemoConfig(
        ranks=ranks,
        comms=comms,
        sizes=tuple(sizes),
        buckets=tuple(buckets),
        steps=steps,
        seed=seed,
        load=load,
        processes=processes,
    )
    try:
        cfg.validate()
    except ValueError as e:
        raise click.UsageError(str(e)) from e  # the message names the option
    # absolute: the emulator runs in directories of its own
    out = (out_dir or Path.cwd() / time.strftime("autoccl-demo-%Y%m%d-%H%M%S")).expanduser().resolve()
    if out.exists() and not out.is_dir():
        raise click.BadParameter(f"{out} exists and is not a directory", param_hint="'-o'")
    why = missing_parent(out)
    if why:
        raise click.BadParameter(why, param_hint="'-o'")
    earlier = [out / d for d in ("emu-nccl", "emu-online", "results.json") if (out / d).exists()]
    if earlier and not force:
        # its emu-online/cache holds the first run's tuning table: a second run would start from it
        raise click.ClickException(
            f"{out} holds an earlier demo (its tuning table would warm-start this one); choose another "
            "directory or pass --force to replace it"
        )
    try:  # made before the banner: a folder that cannot be made is refused before any work
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise click.BadParameter(f"cannot make {out}: {e.strerror or e}", param_hint="'-o'") from e
    for old in earlier:
        if old.is_dir():
            shutil.rmtree(old)
        else:
            old.unlink()
    console = report_console()
    # the library's settings (the emulator starts its ranks from a clean environment); the CLI's own, such as
    # AUTOCCL_LIB_DIR, still apply
    ignored = sorted(k for k, v in settings.BY_NAME.items() if v.reader == "library" and k in os.environ)
    # and NCCL's own, which the emulator would honour as NCCL does: the demo compares with NCCL's defaults
    ignored += sorted(k for k in os.environ if k.startswith("NCCL_") and k not in SAFETY_ENV)
    if ignored:
        click.echo(
            f"autoccl demo: not applied here: {', '.join(ignored)} (the demo runs the library's and NCCL's "
            "defaults; `autoccl run` applies them to a job)",
            err=True,
        )
    console.print(
        f"[bold]autoccl demo[/]: {ranks} simulated H200 ranks, {cfg.communicators_used()} communicator(s), "
        f"{steps} steps, "
        f"GEMM load {load} (a computation beside the collectives, --load), "
        f"{'process per rank (TCP)' if processes else 'ranks as threads'}"
    )
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TextColumn("{task.fields[detail]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as bar:
        ids: dict[str, TaskID] = {}

        def progress(stage: str, frac: float, per_task: dict[str, int]) -> None:
            if stage not in ids:
                ids[stage] = bar.add_task(stage, total=1.0, detail="")
            detail = ""
            if per_task:
                done = sum(1 for v in per_task.values() if v >= steps)
                detail = f"{len(per_task)} tasks seen, {done} done"
            bar.update(ids[stage], completed=frac, detail=detail)

        try:
            res = run_demo(cfg, out, progress=progress)
        except DemoUnavailable as e:
            raise click.ClickException(str(e)) from e
        except ArtefactNotFound as e:
            raise click.ClickException(f"the emulator or the library is not built: {e}") from e
        except RuntimeError as e:
            raise click.ClickException(str(e)) from e
    console.print(rich_table(res, console))
    for t in res.tasks:
        if t.converged_at is None:
            console.print(
                f"[yellow]{t.key.coll} {t.key.nbytes} B did not settle within {t.calls} calls: its gain (*) "
                "is over its last quarter of calls, while it was still trying configurations[/]"
            )
    files = write_all(res, out)
    console.print(f"Results in [bold]{out}[/]: " + ", ".join(p.name for p in files.values()))
    # The online run's table lives in the demo's folder, not in the user's cache: say how to look at it.
    cache = out / "emu-online" / "cache"
    for table in sorted((cache / "tables").glob("*.table")):
        # soft_wrap: the command stays on one line, to be copied whole
        console.print(
            f"Its tuning table: [bold]autoccl cache show {table.stem} --cache-dir {cache}[/]", soft_wrap=True
        )
