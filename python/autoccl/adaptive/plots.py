"""A picture of a topology document: NPUs on a circle, switches and NICs inside, one line per connected
pair, its width growing with the bandwidth and labelled in GB/s."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from autoccl.figures import save_figure


def topology_plot(doc: dict[str, Any], path: str | Path, title: str | None = None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    npus = list(doc.get("npus", []))
    inner = list(doc.get("switches", [])) + list(doc.get("nics", []))
    pos: dict[str, tuple[float, float]] = {}
    for i, n in enumerate(npus):
        angle = 2 * math.pi * i / max(len(npus), 1) + math.pi / 2
        pos[n] = (math.cos(angle), math.sin(angle))
    for i, n in enumerate(inner):
        angle = 2 * math.pi * i / max(len(inner), 1) + math.pi / 2
        r = 0.0 if len(inner) == 1 else 0.45
        pos[n] = (r * math.cos(angle), r * math.sin(angle))
    pairs: dict[tuple[str, str], list[float]] = {}
    for link in doc.get("links", []):
        src, dst = sorted((str(link["src"]), str(link["dst"])))
        pairs.setdefault((src, dst), []).append(float(link["bandwidth_gbps"]))
    bws = [max(v) for v in pairs.values()] or [1.0]
    top = max(bws)
    fig, ax = plt.subplots(figsize=(6.5, 6.5))
    for (a, b), vals in pairs.items():
        if a not in pos or b not in pos:
            continue
        (x1, y1), (x2, y2) = pos[a], pos[b]
        bw = max(vals)
        ax.plot([x1, x2], [y1, y2], color="tab:blue", lw=0.5 + 4 * bw / top, alpha=0.6, zorder=1)
        label = f"{bw:.3g}" if len(set(round(v, 6) for v in vals)) == 1 else f"{min(vals):.3g}/{bw:.3g}"
        ax.text((x1 + x2) / 2, (y1 + y2) / 2, label, fontsize=6, ha="center", va="center", color="tab:blue")
    for n, (x, y) in pos.items():
        is_npu = n in npus
        ax.scatter(
            [x],
            [y],
            s=220 if is_npu else 160,
            marker="o" if is_npu else "s",
            color="tab:orange" if is_npu else "tab:gray",
            zorder=2,
        )
        ax.text(x, y - 0.09, n, fontsize=7, ha="center", va="top")
    ax.set_title(title or f"{doc.get('name', 'topology')} (GB/s)", fontsize=10)
    # fixed limits: points on one vertical line (two NPUs) would otherwise squeeze the axes to a strip
    ax.set_xlim(-1.35, 1.35)
    ax.set_ylim(-1.35, 1.35)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
