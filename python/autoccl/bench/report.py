"""`autoccl report`: plots (matplotlib, Agg) and markdown tables from stored bench results."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from autoccl.bench import results as R
from autoccl.bench.spec import SHORT, format_size
from autoccl.figures import save_figure


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig: Any, outdir: Path, name: str, formats: list[str]) -> list[Path]:
    paths = []
    for fmt in formats:
        p = outdir / f"{name}.{fmt}"
        save_figure(fig, p, dpi=130, bbox_inches="tight")
        paths.append(p)
    _plt().close(fig)
    return paths


def make_report(files: list[Path], outdir: Path, formats: list[str], mix: bool = False) -> list[Path]:
    docs = [R.load_doc(f) for f in files]
    coll = [(d, str(f)) for d, f in zip(docs, files, strict=True) if d.get("kind") == "coll"]
    train_docs = [d for d in docs if d.get("kind") == "train"]
    doc = R.merge_docs([d for d, _ in coll], [n for _, n in coll], mix=mix) if coll else None
    if outdir.exists() and not outdir.is_dir():
        raise R.ResultError(f"{outdir} exists and is not a directory")
    outdir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    coll_docs = [d for d, _ in coll]
    if coll_docs and doc is not None:
        written += busbw_plots(doc, outdir, formats)
        written += speedup_heatmaps(doc, outdir, formats)
        written += convergence_plots(doc, outdir, formats)
        p = outdir / "coll.md"
        p.write_text(R.coll_markdown(doc))
        written.append(p)
    for i, doc in enumerate(train_docs):
        tag = "" if len(train_docs) == 1 else f"-{i}"
        written += iteration_plots(doc, outdir, formats, tag)
        p = outdir / f"train{tag}.md"
        p.write_text(R.train_markdown(doc))
        written.append(p)
    return written


def _key_metric(load: str) -> str:
    return "busbw_gbs" if load == "none" else "busbw_load_gbs"


def busbw_plots(doc: dict[str, Any], outdir: Path, formats: list[str]) -> list[Path]:
    """busbw against size, one line per mode, for every (collective, load); bars: min..max of the reps
    (without load)."""
    plt = _plt()
    rows = [r for r in R.summary_rows(doc) if R.valid(r)]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["coll"], r["load"])].append(r)
    out: list[Path] = []
    for (coll, load), rs in sorted(groups.items()):
        fig, ax = plt.subplots(figsize=(7, 4.2))
        by_mode: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in rs:
            by_mode[r["mode"]].append(r)
        metric = _key_metric(load)
        for mode, mr in by_mode.items():
            mr.sort(key=lambda r: r["bytes"])
            xs = [r["bytes"] for r in mr]
            # a value without a number is null in the JSON (NaN in files of earlier versions): a gap
            ys = [_number(r.get(metric)) for r in mr]
            if load == "none":
                lo = [max(0.0, y - _number(r.get("busbw_gbs_min", y))) for y, r in zip(ys, mr, strict=True)]
                hi = [max(0.0, _number(r.get("busbw_gbs_max", y)) - y) for y, r in zip(ys, mr, strict=True)]
                ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", ms=3, capsize=2, label=mode)
            else:
                ax.plot(xs, ys, marker="o", ms=3, label=mode)
        ax.set_xscale("log", base=2)
        ticks = sorted({r["bytes"] for r in rs})
        ax.set_xticks(ticks)
        ax.set_xticklabels([format_size(t) for t in ticks], rotation=45, fontsize=7)
        ax.set_xlabel("size (nccl-tests convention)")
        ax.set_ylabel("busbw GB/s" + (" under load" if load != "none" else ""))
        ax.set_title(
            f"{coll} ({SHORT.get(coll, coll)}), load {load}, {doc['settings'].get('world_size')} ranks"
        )
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        out += _save(fig, outdir, f"busbw_{coll}_{_fname(load)}", formats)
    return out


def _number(v: Any) -> float:
    """A stored value as a float, NaN where it is none (null, or absent)."""
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _fname(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)


def speedup_matrix(doc: dict[str, Any], mode: str) -> tuple[list[int], list[str], list[list[float]]]:
    """Rows: sizes; columns: collective@load; values: speedup of `mode` over nccl in the cell's objective."""
    rows = R.summary_rows(doc)
    idx = {(r["mode"], r["coll"], r["load"], r["bytes"]): r for r in rows}
    cols = list(dict.fromkeys(f"{r['coll']}@{r['load']}" for r in rows))
    sizes = sorted({r["bytes"] for r in rows})
    mat = []
    for b in sizes:
        line = []
        for c in cols:
            coll, load = c.split("@", 1)
            r, base = idx.get((mode, coll, load, b)), idx.get(("nccl", coll, load, b))
            line.append(R.speedup(r, base) if r and base else math.nan)
        mat.append(line)
    # keep only sizes and columns with at least one value
    keep_c = [j for j in range(len(cols)) if any(math.isfinite(line[j]) for line in mat)]
    keep_r = [i for i in range(len(sizes)) if any(math.isfinite(mat[i][j]) for j in keep_c)]
    return (
        [sizes[i] for i in keep_r],
        [cols[j] for j in keep_c],
        [[mat[i][j] for j in keep_c] for i in keep_r],
    )


def speedup_heatmaps(doc: dict[str, Any], outdir: Path, formats: list[str]) -> list[Path]:
    plt = _plt()
    import numpy as np
    from matplotlib.colors import TwoSlopeNorm

    rows = R.summary_rows(doc)
    modes = [m for m in dict.fromkeys(r["mode"] for r in rows) if m != "nccl"]
    if not any(r["mode"] == "nccl" for r in rows):
        return []
    out: list[Path] = []
    for mode in modes:
        sizes, cols, mat = speedup_matrix(doc, mode)
        arr = np.array(mat, dtype=float)
        if not np.isfinite(arr).any():
            continue
        lo, hi = float(np.nanmin(arr)), float(np.nanmax(arr))
        norm = TwoSlopeNorm(vcenter=1.0, vmin=min(lo, 0.99), vmax=max(hi, 1.01))
        fig, ax = plt.subplots(figsize=(1.2 + 1.1 * len(cols), 1.0 + 0.35 * len(sizes)))
        im = ax.imshow(np.ma.masked_invalid(arr), cmap="RdYlGn", norm=norm, aspect="auto")
        for i in range(len(sizes)):
            for j in range(len(cols)):
                if math.isfinite(arr[i, j]):
                    ax.text(j, i, f"{arr[i, j]:.2f}", ha="center", va="center", fontsize=7)
        ax.set_xticks(range(len(cols)))
        ax.set_xticklabels([c.replace("@", "\n") for c in cols], fontsize=7, rotation=30, ha="right")
        ax.set_yticks(range(len(sizes)))
        ax.set_yticklabels([format_size(s) for s in sizes], fontsize=7)
        gloo = " - gloo on the CPU: no NCCL, no plugin" if R.gloo_caveat(doc) else ""
        ax.set_title(f"{mode} vs nccl (busbw; makespan under load){gloo}", fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
        out += _save(fig, outdir, f"speedup_{_fname(mode)}", formats)
    return out


def convergence_plots(doc: dict[str, Any], outdir: Path, formats: list[str]) -> list[Path]:
    """Online tuning phase: per-iteration time of every cell during the extra warm-up (harness timing),
    relative to nccl's median time of the cell when available; and, when the plugin wrote a trace, the
    GPU time of each call of every task."""
    plt = _plt()
    out: list[Path] = []
    base = {
        (r["coll"], r["bytes"], r["load"]): r["time_us"]
        for r in doc.get("rows", [])
        if r.get("mode") == "nccl" and R.valid(r)
    }
    by_launch: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for tr in doc.get("warmup_traces", []):
        by_launch[tr["launch"]].append(tr)
    for launch, trs in by_launch.items():
        fig, ax = plt.subplots(figsize=(7, 4.2))
        rel = all((t["coll"], t["bytes"], t["load"]) in base for t in trs)
        for t in trs:
            ys = t["iter_us"]
            if rel:
                ys = [y / base[(t["coll"], t["bytes"], t["load"])] for y in ys]
            ax.plot(
                range(len(ys)),
                ys,
                lw=0.8,
                label=f"{SHORT.get(t['coll'], t['coll'])} {format_size(t['bytes'])}",
            )
        ax.set_xlabel("warm-up iteration")
        ax.set_ylabel("time / nccl median" if rel else "time per iteration (us)")
        if not rel:
            ax.set_yscale("log")
        ax.set_title(f"tuning phase: {launch}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        out += _save(fig, outdir, f"convergence_{_fname(launch)}", formats)
    for ln in doc.get("launches", []):
        conv = [c for c in ln.get("convergence") or [] if c.get("gpu_us")]
        if not conv:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for c in conv:
            ks = [k for k, _ in c["gpu_us"]]
            ys = [v for _, v in c["gpu_us"]]
            line = ax.plot(
                ks, ys, lw=0.8, label=f"{SHORT.get(c['coll'], c['coll'])} {format_size(c['bytes'])}"
            )
            ax.axvline(c["converged_at"], color=line[0].get_color(), ls=":", lw=0.7)
        ax.set_yscale("log")
        ax.set_xlabel("call index (dotted: converged)")
        ax.set_ylabel("GPU time per call (us, plugin trace)")
        ax.set_title(f"plugin trace: {ln['label']}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=6, ncol=2)
        out += _save(fig, outdir, f"trace_{_fname(ln['label'])}", formats)
    return out


def iteration_plots(doc: dict[str, Any], outdir: Path, formats: list[str], tag: str = "") -> list[Path]:
    plt = _plt()
    out: list[Path] = []
    by_par: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for it in doc.get("iterations", []):
        by_par[it["parallel"]].append(it)
    for par, its in by_par.items():
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for it in its:
            ax.plot(range(len(it["iter_ms"])), it["iter_ms"], lw=0.8, label=it["mode"])
        ax.set_xlabel("iteration")
        ax.set_ylabel("iteration time (ms)")
        ax.set_title(f"{doc['settings'].get('preset')} {par}, {doc['settings'].get('world_size')} ranks")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
        out += _save(fig, outdir, f"iterations_{par}{tag}", formats)
    return out
