#!/usr/bin/env python3
"""Whether a launch's per-call level follows where its host threads run, from the CSV that
benchmarks/gpu/placement_levels.sh writes (one row per nccl-tests average: round, coll, placement, launch,
cycle, out-of-place and in-place us per call, the CPU the launch's main thread ran on last, exit code).

Per collective and placement: the launches' medians of the out-of-place averages (each over its averages) and
of the in-place ones, their spread, the spread of averages inside a launch, and how many launches sat at the
slow one of the two levels: all launch medians of the collective split in two classes of least spread
(in log time; the widest gap, as launch_levels.py splits a bench folder's averages, can fall on one outlier).
Writes summary.json, summary.md and levels.png into the output folder.

    python3 benchmarks/nccl_tests/placement_levels.py OUT/placement-levels.csv -o FOLDER
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from statistics import NormalDist
from typing import Any


def read(path: Path, column: str) -> dict[tuple[str, str], dict[int, list[float]]]:
    """(coll, placement) -> launch -> its averages (us per call) of `column` (oop_us or ip_us)."""
    out: dict[tuple[str, str], dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with path.open(newline="") as f:
        for r in csv.DictReader(f):
            if r["rc"] != "0" or int(r["cycle"]) < 0:
                continue
            out[(r["coll"], r["placement"])][int(r["launch"])].append(float(r[column]))
    return out


def two_levels(values: list[float]) -> float:
    """The split between two classes of the sorted values with the least summed squared deviation in log
    time (Otsu's rule); the midpoint between the classes' nearest members."""
    v = sorted(values)
    if len(v) < 2:
        return float("inf")
    logs = [math.log(x) for x in v]

    def sse(xs: list[float]) -> float:
        m = sum(xs) / len(xs)
        return sum((x - m) ** 2 for x in xs)

    i = min(range(1, len(v)), key=lambda j: sse(logs[:j]) + sse(logs[j:]))
    return (v[i - 1] + v[i]) / 2


def last_cpus(path: Path) -> dict[int, int]:
    with path.open(newline="") as f:
        return {int(r["launch"]): int(r["last_cpu"]) for r in csv.DictReader(f)}


def summarise(
    data: dict[tuple[str, str], dict[int, list[float]]],
    inplace: dict[tuple[str, str], dict[int, list[float]]],
    cpus: dict[int, int],
) -> dict[str, Any]:
    colls = sorted({c for c, _ in data})
    out: dict[str, Any] = {}
    for coll in colls:
        medians = [statistics.median(v) for (c, _), ls in data.items() if c == coll for v in ls.values()]
        cut = two_levels(medians)
        rows = []
        for (c, place), launches in sorted(data.items(), key=lambda kv: (kv[0][1] != "free", kv[0][1])):
            if c != coll:
                continue
            meds = {n: statistics.median(v) for n, v in launches.items()}
            ip = {n: statistics.median(v) for n, v in inplace.get((c, place), {}).items()}
            inside = [max(v) / min(v) for v in launches.values() if min(v) > 0]
            rows.append(
                {
                    "placement": place,
                    "launches": len(meds),
                    "median_us": statistics.median(meds.values()),
                    "min_us": min(meds.values()),
                    "max_us": max(meds.values()),
                    "slow_launches": sum(m > cut for m in meds.values()),
                    "inside_launch_max_over_min": statistics.median(inside) if inside else None,
                    "launches_in_order": sorted(meds),
                    "launch_medians_us": [round(meds[n], 2) for n in sorted(meds)],
                    "inplace_launch_medians_us": [round(ip[n], 3) for n in sorted(meds) if n in ip],
                    "last_cpus": [cpus.get(n, -1) for n in sorted(meds)],
                }
            )
        out[coll] = {"levels_split_us": cut, "placements": rows}
    return out


def runs_in_time(s: dict[str, Any]) -> dict[str, Any]:
    """Wald-Wolfowitz runs test on the launches in the order they ran (slow or fast, by their collective's
    split): fewer runs than chance would say the level is a state of the machine that lasts over launches
    rather than one each launch draws."""
    order: dict[int, bool] = {}
    for d in s.values():
        for r in d["placements"]:
            for n, m in zip(r["launches_in_order"], r["launch_medians_us"], strict=True):
                order[n] = m > d["levels_split_us"]
    seq = [order[n] for n in sorted(order)]
    n1, n2 = sum(seq), len(seq) - sum(seq)
    runs = 1 + sum(a != b for a, b in pairwise(seq))
    out: dict[str, Any] = {"launches": len(seq), "slow": n1, "runs": runs}
    if n1 and n2:
        n = n1 + n2
        mu = 2 * n1 * n2 / n + 1
        z = (runs - mu) / math.sqrt((mu - 1) * (mu - 2) / (n - 1))
        out |= {"expected_runs": round(mu, 2), "z": round(z, 3), "p_fewer": round(NormalDist().cdf(z), 4)}
    return out


def markdown(s: dict[str, Any]) -> str:
    lines = [
        "| coll | placement | launches | out of place, us/call: median (min-max) | at the slow level | "
        "inside a launch, max/min (median) | in place, us/call: median (min-max) |",
        "| --- | --- | ---: | --- | ---: | ---: | --- |",
    ]
    for coll, d in s.items():
        for r in d["placements"]:
            inside = r["inside_launch_max_over_min"]
            ip = r["inplace_launch_medians_us"]
            ip_text = f"{statistics.median(ip):.3f} ({min(ip):.3f}-{max(ip):.3f})" if ip else "—"
            lines.append(
                f"| {coll} | {r['placement']} | {r['launches']} | {r['median_us']:.2f} "
                f"({r['min_us']:.2f}-{r['max_us']:.2f}) | {r['slow_launches']} | "
                f"{'—' if inside is None else f'{inside:.3f}'} | {ip_text} |"
            )
    lines.append("")
    lines += [f"{coll}: levels split at {d['levels_split_us']:.2f} us per call" for coll, d in s.items()]
    r = runs_in_time(s)
    if "z" in r:
        lines.append(
            f"in the order they ran: {r['slow']} of {r['launches']} launches slow, {r['runs']} runs against "
            f"{r['expected_runs']} by chance (z {r['z']}, p of so few {r['p_fewer']})"
        )
    return "\n".join(lines) + "\n"


def plot(s: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from autoccl.figures import save_figure

    fig, axes = plt.subplots(1, len(s), figsize=(5 * len(s), 3.6), squeeze=False)
    for ax, (coll, d) in zip(axes[0], s.items(), strict=True):
        names = [r["placement"] for r in d["placements"]]
        for i, r in enumerate(d["placements"]):
            ys = r["launch_medians_us"]
            ax.plot([i + 0.08 * ((k % 5) - 2) for k in range(len(ys))], ys, "o", ms=4, alpha=0.7)
        if d["levels_split_us"] != float("inf"):
            ax.axhline(d["levels_split_us"], color="grey", lw=0.8, ls="--")
        ax.set_xticks(range(len(names)), names)
        ax.set_title(f"{coll} 1 MiB out of place: one dot per launch")
        ax.set_xlabel("host threads: free or taskset cores")
        ax.set_ylabel("us per call (launch median)")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def cpu_probe(path: Path) -> dict[str, Any]:
    """cpu-probe.csv (LL_CPU_PROBE=1): per measure, every launch's value in the order they ran, by placement,
    and how many sat at the slower of two levels (split as the nccl-tests launches are)."""
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("mem_ns")]
    out: dict[str, Any] = {}
    for measure in ("mem_ns", "l1_ns", "muladd_ns"):
        values = [float(r[measure]) for r in rows]
        cut = two_levels(values)
        by_place: dict[str, list[float]] = defaultdict(list)
        for r in rows:
            by_place[r["placement"]].append(float(r[measure]))
        out[measure] = {
            "split": cut,
            "slow": sum(v > cut for v in values),
            "launches": len(values),
            "max_over_min": max(values) / min(values) if values and min(values) > 0 else None,
            "by_placement": {k: [round(v, 4) for v in vs] for k, vs in sorted(by_place.items())},
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", type=Path, help="placement-levels.csv from benchmarks/gpu/placement_levels.sh")
    ap.add_argument("-o", "--out", type=Path, required=True, help="folder for the summary and the plot")
    a = ap.parse_args()
    data = read(a.csv, "oop_us")
    if not data:
        raise SystemExit(f"{a.csv}: no averages of a launch that exited 0")
    s = summarise(data, read(a.csv, "ip_us"), last_cpus(a.csv))
    s_runs = runs_in_time(s)
    a.out.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"colls": s, "runs_in_time": s_runs}
    md = markdown(s)
    probe = a.csv.parent / "cpu-probe.csv"
    if probe.exists():
        doc["cpu_probe"] = cpu_probe(probe)
        md += "\nThe CPU probe (no CUDA, no NCCL), every launch:\n\n"
        for measure, d in doc["cpu_probe"].items():
            spread = "" if d["max_over_min"] is None else f", max/min {d['max_over_min']:.2f}"
            md += f"- {measure}: {d['slow']} of {d['launches']} launches at the slower level{spread}; "
            md += "; ".join(f"{k}: {', '.join(f'{v:g}' for v in vs)}" for k, vs in d["by_placement"].items())
            md += "\n"
    (a.out / "summary.json").write_text(json.dumps(doc, indent=1) + "\n")
    (a.out / "summary.md").write_text(md)
    plot(s, a.out / "levels.png")
    print(md, end="")


if __name__ == "__main__":
    main()
