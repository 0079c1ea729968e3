"""Plots of the plugin's JSONL trace (AUTOCCL_TRACE): the time of every timed call by task, and the decisions
over the calls (what each call was told to run: NCCL's own choice or a configuration the tuner applied).

Read from one rank (rank 0 by default): every rank applies the same decisions, and the timed calls of the
authority are the ones the search scored."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoccl.bench.exposure_truth import record_dicts, slope_cell, whole_number
from autoccl.bench.trace import TORCH_COLL, read_records, trace_files
from autoccl.figures import save_figure

NCCL_LABEL = "NCCL's choice"


class TraceError(ValueError):
    """A trace that cannot be plotted (message: one sentence)."""


@dataclass
class TaskTrace:
    comm: str
    coll: str
    nbytes: int
    decisions: list[tuple[int, str]] = field(default_factory=list)  # (call, decision label)
    times: list[tuple[int, float]] = field(default_factory=list)  # (call, microseconds)

    @property
    def label(self) -> str:
        return f"{self.coll} {_size(self.nbytes)} (comm {self.comm[-4:]})"

    def converged_at(self) -> int:
        """The call from which the decision no longer changes."""
        last = 0
        for i in range(1, len(self.decisions)):
            if self.decisions[i][1] != self.decisions[i - 1][1]:
                last = self.decisions[i][0]
        return last


def _size(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    return f"{n} B"


def decision_label(rec: dict[str, Any]) -> str:
    """A call record's decision: NCCL's own choice, or algorithm/protocol/channels[/chunk] applied."""
    algo, proto = rec.get("algo"), rec.get("proto")
    if algo is None and proto is None:
        return NCCL_LABEL
    text = f"{str(algo).lower()}/{str(proto).lower()}"
    if rec.get("channels"):
        text += f"/{rec['channels']}ch"
    if rec.get("chunk_halvings"):
        text += f"/chunk÷{1 << int(rec['chunk_halvings'])}"
    return text


# The fields of call and time records that tasks_of reads as numbers, by the type they must have.
_INT_FIELDS = ("rank", "bytes", "call", "chunk_halvings")
_TYPED_TEXT = "rank, bytes, call and chunk_halvings must be integers, gpu_us a number"


def _well_typed(rec: dict[str, Any]) -> bool:
    """A record other than a call or time record, or one whose numeric fields are numbers (absent ones take
    their defaults): a damaged or foreign record is left out and said, not a crash."""
    if rec.get("ev") not in ("call", "time"):
        return True
    if any(k in rec and (not isinstance(rec[k], int) or isinstance(rec[k], bool)) for k in _INT_FIELDS):
        return False
    us = rec.get("gpu_us", 0.0)
    return isinstance(us, (int, float)) and not isinstance(us, bool)


def tasks_of(records: Iterable[dict[str, Any]], rank: int = 0) -> list[TaskTrace]:
    """The tasks `rank` saw, ordered by collective and size, with their decisions and timed calls."""
    tasks: dict[tuple[str, str, int], TaskTrace] = {}
    for rec in records:
        if rec.get("rank", 0) != rank or rec.get("ev") not in ("call", "time"):
            continue
        key = (str(rec.get("comm", "")), str(rec.get("coll", "")), int(rec.get("bytes", 0)))
        t = tasks.get(key)
        if t is None:
            t = tasks[key] = TaskTrace(key[0], TORCH_COLL.get(key[1], key[1]), key[2])
        call = int(rec.get("call", -1))
        if rec["ev"] == "call":
            t.decisions.append((call, decision_label(rec)))
        elif "gpu_us" in rec:
            t.times.append((call, float(rec["gpu_us"])))
    for t in tasks.values():
        t.decisions.sort()
        t.times.sort()
    return sorted(tasks.values(), key=lambda t: (t.coll, t.nbytes, t.comm))


def resolve_traces(specs: Iterable[str]) -> list[Path]:
    """Trace files from paths or AUTOCCL_TRACE prefixes (PREFIX.<host>.<pid>.jsonl)."""
    out: list[Path] = []
    for spec in specs:
        p = Path(spec)
        found = [p] if p.is_file() else trace_files(spec)
        if not found:
            raise TraceError(f"trace {spec} not found: give a .jsonl file or the AUTOCCL_TRACE prefix of one")
        out += found
    return out


def plot_trace(
    paths: list[Path],
    outdir: Path,
    formats: list[str],
    rank: int = 0,
    max_tasks: int = 16,
    warn: Callable[[str], None] | None = None,
) -> list[Path]:
    """Writes trace_time_per_call.<fmt>, trace_decisions.<fmt> and trace_tasks.md; returns the files.
    `warn` is told of the lines of each file that could not be read (left out)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records: list[dict[str, Any]] = []
    for path in paths:
        recs = read_records([path], warn)
        typed = [r for r in recs if _well_typed(r)]
        if len(typed) < len(recs) and warn is not None:
            n = len(recs) - len(typed)
            what = f"call record{'s' if n > 1 else ''} with wrong-typed fields"
            warn(f"skipped {n} {what} in {path} ({_TYPED_TEXT})")
        records += typed
    tasks = [t for t in tasks_of(records, rank) if t.decisions]
    if not tasks:
        ranks = sorted({int(r.get("rank", 0)) for r in records if r.get("ev") == "call"})
        if ranks:  # another rank's trace: say which ranks it holds
            held = ", ".join(map(str, ranks))
            raise TraceError(
                f"the trace has no calls of rank {rank}; it holds rank{'s' if len(ranks) > 1 else ''} "
                f"{held} (--rank)"
            )
        raise TraceError(f"the trace has no calls of rank {rank} (is it an AUTOCCL_TRACE file?)")
    shown = sorted(tasks, key=lambda t: -t.nbytes)[:max_tasks]
    shown.sort(key=lambda t: (t.coll, t.nbytes, t.comm))
    labels = sorted({d for t in shown for _, d in t.decisions}, key=lambda d: (d != NCCL_LABEL, d))
    # NCCL's choice grey; the tuner's configurations from palettes without greys.
    palette = [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (14, 15)]  # type: ignore[attr-defined]
    palette += list(plt.get_cmap("tab20b").colors)  # type: ignore[attr-defined]
    color = {d: ("#9a9a9a" if d == NCCL_LABEL else palette[i % len(palette)]) for i, d in enumerate(labels)}
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    note = f" ({len(shown)} largest of {len(tasks)} tasks)" if len(shown) < len(tasks) else ""

    # Time per call: one panel per task, each timed call coloured by the decision it ran under.
    cols = min(4, len(shown))
    rows = (len(shown) + cols - 1) // cols
    legend_h = 0.22 * ((len(labels) + 3) // 4) + 0.3  # inches below the panels for the legend
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 2.8 * rows + legend_h), squeeze=False)
    for ax, t in zip(axes.flat, shown, strict=False):  # more panels than tasks: the rest are blanked below
        told = dict(t.decisions)
        for d in labels:
            pts = [(k, us) for k, us in t.times if told.get(k) == d]
            if pts:
                ax.scatter([k for k, _ in pts], [us for _, us in pts], s=6, color=color[d], label=d)
        ax.axvline(t.converged_at(), color="black", lw=0.8, ls="--")
        if not t.times:  # an empty axis of 0-1 µs read as a measurement
            ax.text(0.5, 0.5, "no timed call", transform=ax.transAxes, ha="center", va="center", fontsize=9)
            ax.set_yticks([])
        ax.set_title(t.label, fontsize=9)
        ax.set_xlabel("call", fontsize=8)
        ax.set_ylabel("µs", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(shown) :]:
        ax.axis("off")
    handles = [plt.Line2D([], [], marker="o", ls="", color=color[d], label=d) for d in labels]
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.suptitle(
        f"time of each timed call, rank {rank}{note}; dashed: the decision is final from here", fontsize=10
    )
    fig.tight_layout(rect=(0, legend_h / fig.get_figheight(), 1, 0.96))
    for fmt in formats:
        p = outdir / f"trace_time_per_call.{fmt}"
        save_figure(fig, p, dpi=110)
        written.append(p)
    plt.close(fig)

    # Decisions over the calls: one row per task, a bar per run of calls under the same decision.
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(shown) + 1.6 + legend_h))
    for row, t in enumerate(shown):
        start = 0
        for i in range(1, len(t.decisions) + 1):
            if i == len(t.decisions) or t.decisions[i][1] != t.decisions[start][1]:
                first, last = t.decisions[start][0], t.decisions[i - 1][0]
                ax.broken_barh(
                    [(first, last - first + 1)], (row - 0.4, 0.8), color=color[t.decisions[start][1]]
                )
                start = i
    ax.set_yticks(range(len(shown)), [t.label for t in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("call index")
    ax.set_title(f"decisions over the calls, rank {rank}{note}", fontsize=10)
    # below the axes and their label, in room of its own (anchored to the axes it sat on "call index")
    fig.legend(handles=handles, loc="lower center", ncol=min(4, len(labels)), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, legend_h / fig.get_figheight(), 1, 1))
    for fmt in formats:
        p = outdir / f"trace_decisions.{fmt}"
        save_figure(fig, p, dpi=110, bbox_inches="tight")
        written.append(p)
    plt.close(fig)

    md = outdir / "trace_tasks.md"
    lines = [
        f"Tasks of rank {rank} in {len(paths)} trace file(s).",
        "",
        "| task | calls | timed | decisions tried | final from call | final decision |",
        "|---|---|---|---|---|---|",
    ]
    for t in tasks:
        lines.append(
            f"| {t.label} | {len(t.decisions)} | {len(t.times)} | {len({d for _, d in t.decisions})} | "
            f"{t.converged_at()} | {t.decisions[-1][1]} |"
        )
    lines += [
        "",
        "Decisions are the plugin's: a configuration it forces counts as its own even where it equals what",
        f'NCCL would have run ("{NCCL_LABEL}" is a call left to NCCL). A report of what ran, such as the',
        "demo's tasks.md, can therefore put a task's last change earlier.",
    ]
    lines += exposure_lines(records, rank)
    md.write_text("\n".join(lines) + "\n")
    written.append(md)
    return written


def exposure_lines(records: Iterable[dict[str, Any]], rank: int) -> list[str]:
    """trace_tasks.md's section on the exposure estimate (the authority's `exposure` record at finalize, one a
    communicator; docs/online-search.md, "Exposure"): per task, its calls' mean exposure; per position, the
    verdicts. Empty where the trace has none for `rank`."""
    recs = [r for r in records if r.get("ev") == "exposure" and r.get("rank", 0) == rank]
    if not recs:
        return []
    lines = [
        "",
        "## Which calls the iteration waits for (the exposure estimate)",
        "",
        "Slope of the iteration time on a task's summed windows: its calls' mean exposure (1: the iteration",
        "waits for them, 0: computation hides them); a verdict needs a standard error of at most 0.2.",
    ]
    for r in recs:
        positions = record_dicts(r.get("positions"))
        count = {v: sum(q.get("verdict") == v for q in positions) for v in ("exposed", "hidden", "unknown")}
        lines += [
            "",
            f"Communicator {r.get('comm', '?')}: an iteration of {r.get('period', '?')} calls, "
            f"{r.get('samples', 0)} samples ({r.get('outliers', 0)} left out), "
            f"{r.get('timed_for_it', 0)} calls timed for the estimate alone; positions: "
            f"{count['exposed']} exposed, {count['hidden']} hidden, {count['unknown']} unknown.",
        ]
        if r.get("out_of_bounds") is True:
            lines.append(
                "A task's slope lies outside 0-1 beyond its error: the windows move with the iteration for "
                "more than their own time (a wait for a peer inside them, contention): no verdict is given."
            )
        tasks = record_dicts(r.get("tasks"))
        if "tasks" not in r:
            lines.append("(no per-task estimate in this record: a plugin from before it)")
            continue
        if not tasks:
            lines.append("(no per-task estimate: no samples yet, or more positions than the estimate takes)")
            continue
        lines += ["", "| task | calls an iteration | mean exposure ± se | verdict |", "|---|---|---|---|"]
        for t in tasks:
            nbytes = whole_number(t.get("bytes"))
            size = "?" if nbytes is None else _size(nbytes)
            label = f"{TORCH_COLL.get(str(t.get('coll')), t.get('coll'))} {size}"
            lines.append(
                f"| {label} | {t.get('calls', '?')} | {slope_cell(t.get('slope'), t.get('se'))} | "
                f"{t.get('verdict', 'unknown')} |"
            )
    return lines
