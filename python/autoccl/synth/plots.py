"""Link-utilization heat map (TACOS Fig. 1 style) and a per-link time-line chart."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from autoccl.figures import save_figure


def _positions(topology: Any) -> dict[str, tuple[float, float]]:
    nodes = [n for n, _ in topology.nodes]
    layout = list(topology.layout)
    if len(layout) == len(nodes) and any(x or y for x, y in layout[: topology.num_npus]):
        pos = {n: (float(x), float(y)) for n, (x, y) in zip(nodes, layout, strict=True)}
        # non-NPU nodes without a layout: put them above the grid
        top = max((y for _, y in pos.values()), default=0.0) + 1.5
        for i, (n, kind) in enumerate(topology.nodes):
            if kind != "npu" and pos[n] == (0.0, 0.0):
                pos[n] = (float(i % 16), top + i // 16)
        return pos
    npus = [n for n, k in topology.nodes if k == "npu"]
    others = [n for n, k in topology.nodes if k != "npu"]
    pos = {}
    for i, n in enumerate(npus):
        a = 2 * math.pi * i / max(1, len(npus))
        pos[n] = (math.cos(a), math.sin(a))
    for i, n in enumerate(others):
        a = 2 * math.pi * i / max(1, len(others))
        pos[n] = (0.45 * math.cos(a), 0.45 * math.sin(a))
    return pos


def heatmap(topology: Any, link_util: list[float], path: str | Path, title: str = "") -> None:
    """Draw every directed link coloured by its utilization (busy time / collective time)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection

    pos = _positions(topology)
    segs, vals = [], []
    for (src, dst, _lat, _bw), u in zip(topology.links, link_util, strict=True):
        (x0, y0), (x1, y1) = pos[src], pos[dst]
        dx, dy = x1 - x0, y1 - y0
        norm = math.hypot(dx, dy) or 1.0
        ox, oy = -dy / norm * 0.08, dx / norm * 0.08  # offset the two directions apart
        segs.append([(x0 + ox + 0.15 * dx, y0 + oy + 0.15 * dy), (x1 + ox - 0.15 * dx, y1 + oy - 0.15 * dy)])
        vals.append(u)
    fig, ax = plt.subplots(figsize=(7, 6))
    lc = LineCollection(segs, cmap="inferno", linewidths=2.0)
    lc.set_array(vals)
    lc.set_clim(0.0, 1.0)
    ax.add_collection(lc)
    xs = [p[0] for p in pos.values()]
    ys = [p[1] for p in pos.values()]
    kinds = dict(topology.nodes)
    ax.scatter(
        [pos[n][0] for n in pos if kinds[n] == "npu"],
        [pos[n][1] for n in pos if kinds[n] == "npu"],
        s=12,
        c="tab:blue",
        zorder=3,
        label="NPU",
    )
    other = [n for n in pos if kinds[n] != "npu"]
    if other:
        ax.scatter(
            [pos[n][0] for n in other],
            [pos[n][1] for n in other],
            s=30,
            marker="s",
            c="tab:green",
            zorder=3,
            label="switch/NIC",
        )
    ax.set_xlim(min(xs) - 0.5, max(xs) + 0.5)
    ax.set_ylim(min(ys) - 0.5, max(ys) + 0.5)
    ax.set_aspect("equal")
    ax.axis("off")
    fig.colorbar(lc, ax=ax, label="link utilization")
    ax.set_title(title or "link utilization")
    ax.legend(loc="upper right", fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=130)
    plt.close(fig)


def timeline(
    topology: Any, timed_schedule: Any, path: str | Path, max_links: int = 48, title: str = ""
) -> None:
    """Gantt chart: one row per link (the busiest `max_links`), one bar per transfer, coloured by chunk."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cols = timed_schedule.transfer_columns()
    routes = timed_schedule.routes
    per_link: dict[int, list[tuple[float, float, int]]] = {}
    for c, st, en, r in zip(cols["chunk"], cols["start_us"], cols["end_us"], cols["route"], strict=True):
        for link in routes[int(r)] if r >= 0 else []:
            per_link.setdefault(int(link), []).append((float(st), float(en), int(c)))
    busy = sorted(per_link, key=lambda k: -sum(e - s for s, e, _ in per_link[k]))[:max_links]
    busy.sort()
    links = topology.links
    fig, ax = plt.subplots(figsize=(10, max(2.5, 0.22 * len(busy) + 1)))
    cmap = plt.get_cmap("tab20")
    nchunks = max(1, timed_schedule.nchunks)
    for row, link in enumerate(busy):
        bars = [(s, e - s) for s, e, _ in per_link[link]]
        colors = [cmap((c * 7919 % nchunks) / nchunks) for _, _, c in per_link[link]]
        ax.broken_barh(bars, (row - 0.4, 0.8), facecolors=colors, linewidth=0)
    ax.set_yticks(range(len(busy)))
    ax.set_yticklabels([f"{links[k][0]}→{links[k][1]}" for k in busy], fontsize=6)
    ax.set_xlabel("time (µs)")
    ax.set_title(title or "transfers per link")
    fig.tight_layout()
    save_figure(fig, path, dpi=130)
    plt.close(fig)
