"""Loss and step-time curves of `autoccl bench train` launches that record them (resilience runs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from autoccl.figures import save_figure


def _rolling(values: list[float | None], window: int) -> tuple[list[int], list[float]]:
    """Mean over the last `window` steps that have a value (a late rank skips steps)."""
    xs, ys, buf = [], [], []
    for i, v in enumerate(values):
        if v is None:
            continue
        buf.append(v)
        if len(buf) > window:
            buf.pop(0)
        xs.append(i)
        ys.append(sum(buf) / len(buf))
    return xs, ys


def plot_curves(doc: dict[str, Any], path: Path, window: int = 20) -> Path | None:
    """Two panels against the step: training loss and step time, both as means over `window` steps;
    the injected slow steps (straggler) and the lost rank's step (kill) are marked."""
    its = [it for it in doc.get("iterations", []) if it.get("loss")]
    if not its:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8.5, 7), sharex=True)
    for it in its:
        style = "-" if "resilient" in it["launch"] else "--"
        xs, ys = _rolling(it["loss"], window)
        top.plot(xs, ys, style, label=it["launch"], linewidth=1.2)
        xs, ys = _rolling(list(it["iter_ms"]), window)
        bottom.plot(xs, ys, style, label=it["launch"], linewidth=1.2)
    plans = [r.get("straggler_plan") for r in doc.get("train", []) if r.get("straggler_plan")]
    if plans:
        slow = sorted(int(k) for k in plans[0])
        bottom.plot(slow, [0.0] * len(slow), "|", color="gray", markersize=8, label="straggler slowed")
    s = doc.get("settings", {})
    if s.get("kill"):
        step = int(str(s["kill"]).split(":")[1])
        for ax in (top, bottom):
            ax.axvline(step, color="red", linewidth=0.8, linestyle=":")
        bottom.text(step, 0.0, f" rank {str(s['kill']).split(':')[0]} killed", color="red", va="bottom")
    top.set_ylabel(f"training loss (mean of {window} steps)")
    bottom.set_ylabel(f"step time, ms (mean of {window} steps)")
    bottom.set_xlabel("step")
    bottom.set_ylim(bottom=0)
    title = f"{s.get('preset')}, {s.get('world_size')} ranks, {s.get('device')}"
    if s.get("straggler"):
        title += f", straggler {s['straggler']}"
    top.set_title(title)
    top.legend(fontsize=8)
    bottom.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    save_figure(fig, path, dpi=110)
    plt.close(fig)
    return path
