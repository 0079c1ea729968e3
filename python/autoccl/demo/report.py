"""Outputs of `autoccl demo`: the per-task table (rich + Markdown + JSON) and the PNG plot."""

from __future__ import annotations

from pathlib import Path

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from autoccl import jsonout
from autoccl.demo import DemoResult, TaskResult
from autoccl.figures import save_figure


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _conv(t: TaskResult) -> str:
    return str(t.converged_at) if t.converged_at is not None else f"> {t.calls}"


COLUMNS = (
    "comm",
    "collective",
    "size",
    "NCCL's choice",
    "NCCL us",
    "autoccl",
    "tuned us",
    "gain",
    "converged at call",
)


# A task still searching at its last call: its times are the last quarter's, under the configurations it was
# trying, so its gain is not the gain of the configuration shown (which may be NCCL's own).
UNSETTLED_MARK = " *"
UNSETTLED_NOTE = "* still searching: times over its last quarter of calls, under the configurations it tried"


def rows(res: DemoResult) -> list[list[str]]:
    out = []
    for t in res.tasks:
        out.append(
            [
                t.key.comm,
                t.key.coll,
                human_bytes(t.key.nbytes),
                t.nccl_config,
                f"{t.nccl_us:.1f}",
                t.tuned_config,
                f"{t.tuned_us:.1f}",
                f"{100 * t.gain:+.1f} %" + ("" if t.converged_at is not None else UNSETTLED_MARK),
                _conv(t),
            ]
        )
    return out


def total_text(res: DemoResult) -> str:
    """The summed gain in words ("+3.9 %" read as more time to some)."""
    g = 100 * res.total_gain
    if round(g, 1) == 0:
        return "the same collective time as NCCL alone"
    return f"{abs(g):.1f} % {'less' if g > 0 else 'more'} collective time than NCCL alone"


def _two_lines(config: str) -> str:
    """ring/simple/24ch/2048K -> ring/simple, then 24ch/2048K."""
    parts = config.split("/", 2)
    return "/".join(parts[:2]) + ("\n" + parts[2] if len(parts) > 2 else "")


def rich_table(res: DemoResult, console: Console | None = None) -> Table:
    """The per-task table, one line per task where the console is wide enough for that; else compact (a
    task's names and each configuration on two lines, no vertical rules: 77 columns), as at 80 columns the
    wide table's configurations were cut to "ring/…"."""
    cfg = res.config
    title = (
        f"autoccl online on a simulated {cfg.ranks} x H200 node "
        f"({'process per rank, TCP' if cfg.processes else 'ranks as threads'}; seed {cfg.seed})"
    )
    caption = f"all tasks: {total_text(res)}"
    if any(t.converged_at is None for t in res.tasks):
        caption += "\n" + UNSETTLED_NOTE

    def gain_cell(gain: str) -> str:
        settled_gain = gain.startswith("+") and gain != "+0.0 %" and not gain.endswith(UNSETTLED_MARK)
        return f"[green]{gain}[/]" if settled_gain else gain

    def right(c: str) -> bool:
        return c.endswith(("us", "gain", "call"))

    wide = Table(title=title, caption=caption)
    for c in COLUMNS:
        wide.add_column(c, justify="right" if right(c) else "left", no_wrap=c != "converged at call")
    for r in rows(res):
        wide.add_row(*r[:7], gain_cell(r[7]), r[8])
    if console is None:
        return wide
    if Measurement.get(console, console.options.update_width(1 << 16), wide).maximum <= console.width:
        return wide
    compact = Table(title=title, caption=caption, box=box.SIMPLE_HEAD, pad_edge=False)
    # fold, never "…": 64 ranks' times of milliseconds were cut to "1616…" at 80 columns
    for c in ("task", "NCCL's\nchoice", "us", "autoccl", "us", "gain", "settled\nat call"):
        compact.add_column(c, justify="right" if right(c) else "left", overflow="fold")
    for r in rows(res):
        compact.add_row(
            f"{r[1]}\n{r[0]} {r[2]}",
            _two_lines(r[3]),
            _short_us(r[4]),
            _two_lines(r[5]),
            _short_us(r[6]),
            gain_cell(r[7]),
            r[8],
        )
    return compact


def _short_us(us: str) -> str:
    """16161.2 -> 16161: a tenth of a microsecond says nothing beside milliseconds, and takes 2 columns."""
    return f"{float(us):.0f}" if float(us) >= 1000 else us


def write_markdown(res: DemoResult, path: Path) -> None:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(res)]
    lines.append("")
    lines.append(f"All tasks: {total_text(res)} (sum of per-task medians).")
    if any(t.converged_at is None for t in res.tasks):
        lines.append(UNSETTLED_NOTE + ".")
    lines.append(
        "Times are the emulator's ground truth (true kernel time per call), medians over the calls after"
        " convergence, NCCL alone vs autoccl online on the same calls with the same noise."
    )
    path.write_text("\n".join(lines) + "\n")


def write_json(res: DemoResult, path: Path) -> None:
    cfg = res.config
    doc = {
        "config": {
            "ranks": cfg.ranks,
            "comms": cfg.comms,
            "sizes": list(cfg.sizes),
            "buckets": list(cfg.buckets),
            "steps": cfg.steps,
            "seed": cfg.seed,
            "load": cfg.load,
            "processes": cfg.processes,
        },
        "total_gain": res.total_gain,
        "tasks": [
            {
                "comm": t.key.comm,
                "coll": t.key.coll,
                "bytes": t.key.nbytes,
                "calls": t.calls,
                "nccl_config": t.nccl_config,
                "nccl_us": t.nccl_us,
                "tuned_config": t.tuned_config,
                "tuned_us": t.tuned_us,
                "gain": t.gain,
                "converged_at": t.converged_at,
                "trace_nccl_us": t.trace_nccl,
                "trace_tuned_us": t.trace_tuned,
            }
            for t in res.tasks
        ],
        "ground_truth": {
            "nccl": str(res.plain.workdir) if res.plain.workdir else None,
            "online": str(res.online.workdir) if res.online.workdir else None,
        },
    }
    path.write_text(jsonout.dumps(doc, indent=1) + "\n")


def write_plot(res: DemoResult, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = res.tasks
    n = len(tasks)
    cols = min(3, n)
    nrows = (n + cols - 1) // cols
    fig = plt.figure(figsize=(5.0 * cols, 2.8 * nrows + 3.2), layout="constrained")
    grid = fig.add_gridspec(nrows + 1, cols, height_ratios=[1.0] * nrows + [1.1])
    for i, t in enumerate(tasks):
        ax = fig.add_subplot(grid[i // cols, i % cols])
        x = list(range(len(t.trace_tuned)))
        ax.plot(x, t.trace_nccl, color="0.6", lw=0.8, label="NCCL alone")
        ax.plot(x, t.trace_tuned, color="tab:blue", lw=0.9, label="autoccl online")
        if t.converged_at is not None:
            ax.axvline(t.converged_at, color="tab:green", ls="--", lw=0.8, label="converged")
        ax.set_title(
            f"{t.key.comm} {t.key.coll} {human_bytes(t.key.nbytes)}: {100 * t.gain:+.1f} %", fontsize=9
        )
        lo = min(min(t.trace_nccl), min(t.trace_tuned))
        if max(max(t.trace_nccl), max(t.trace_tuned)) > 4 * lo > 0:
            ax.set_yscale("log")  # exploration outliers would flatten the converged part
        ax.set_xlabel("call", fontsize=8)
        ax.set_ylabel("kernel time (us)", fontsize=8)
        ax.tick_params(labelsize=7)
        if i == 0:
            ax.legend(fontsize=7)
    ax = fig.add_subplot(grid[nrows, :])
    labels = [f"{t.key.coll}\n{human_bytes(t.key.nbytes)}" for t in tasks]
    gains = [100 * t.gain for t in tasks]
    ax.bar(range(n), gains, color=["tab:green" if g > 0 else "tab:red" for g in gains])
    ax.set_xticks(range(n), labels, fontsize=7)
    ax.axhline(0, color="k", lw=0.6)
    ax.set_ylabel("gain vs NCCL (%)")
    ax.set_title(f"gain per task (all tasks {100 * res.total_gain:+.1f} %)", fontsize=10)
    fig.suptitle(
        f"autoccl demo: online tuning on a simulated {res.config.ranks} x H200 node (emulator ground truth)"
    )
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_all(res: DemoResult, out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "table": out_dir / "tasks.md",
        "json": out_dir / "results.json",
        "plot": out_dir / "convergence.png",
    }
    write_markdown(res, files["table"])
    write_json(res, files["json"])
    write_plot(res, files["plot"])
    return files
