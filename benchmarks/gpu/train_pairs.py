"""Summarise interleaved `autoccl bench train` launch pairs (bench.sh plans train / train-ceiling).

Each input JSON is one invocation: plain NCCL then online, per parallelism. Writes, into OUT:
  pairs.csv        one row per (invocation, parallelism): plain and online steady ms, online/plain speed
  summary.md       per (call, parallelism, variant): median [min-max] speed and how far plain moved
  iterations.json  every launch's per-iteration step times
  steps.png        rolling median of 10 steps, plain against online, one panel per pair

    python benchmarks/gpu/train_pairs.py OUT CALL=DIR [CALL=DIR ...]

DIR holds pair<P>_<variant>.json files (variant: default, ceiling0)."""

from __future__ import annotations

import csv
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

NAME = re.compile(r"pair(\d+)_(\w+)\.json$")


def _rows(call: str, folder: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    pairs: list[dict[str, Any]] = []
    iters: list[dict[str, Any]] = []
    for f in sorted(folder.glob("pair*_*.json")):
        m = NAME.search(f.name)
        if not m:
            continue
        doc = json.loads(f.read_text())
        n = int(doc["settings"].get("iters", 0) or 0) if isinstance(doc.get("settings"), dict) else 0
        steady = {(t["parallel"], t["mode"]): t["steady_ms"] for t in doc["train"]}
        for par in sorted({p for p, _ in steady}):
            if (par, "nccl") not in steady or (par, "online") not in steady:
                continue
            plain, online = steady[(par, "nccl")], steady[(par, "online")]
            pairs.append(
                {
                    "call": call,
                    "file": f"pair{m[1]}",
                    "iters": n or len(doc["iterations"][0]["iter_ms"]),
                    "parallel": par,
                    "online_variant": m[2],
                    "plain_steady_ms": round(plain, 2),
                    "online_steady_ms": round(online, 2),
                    "speed_ratio": round(plain / online, 4),
                }
            )
        for it in doc["iterations"]:
            iters.append({"call": call, "pair": f"pair{m[1]}", "variant": m[2], **it})
    return pairs, iters


def _ci95(ratios: list[float]) -> str:
    """Geometric mean of the pairs' ratios with a 95 % t-interval on their logarithms (pairs are independent
    launches; the ratio is multiplicative)."""
    from scipy import stats

    logs = np.log(np.asarray(ratios))
    g = float(np.exp(logs.mean()))
    if len(logs) < 3:
        return f"{g:.3f}× (too few pairs for an interval)"
    half = float(stats.t.ppf(0.975, len(logs) - 1) * logs.std(ddof=1) / np.sqrt(len(logs)))
    return f"{g:.3f}× [{np.exp(logs.mean() - half):.3f}–{np.exp(logs.mean() + half):.3f}]"


def _summary(pairs: list[dict[str, Any]]) -> str:
    out = [
        "| call | parallel | online | pairs | online/plain speed, median [min–max] "
        "| geomean [95 % CI] | plain moved (max/min − 1) |",
        "| --- | --- | --- | ---: | --- | --- | ---: |",
    ]
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for p in pairs:
        groups.setdefault((p["call"], p["parallel"], p["online_variant"]), []).append(p)
    for (call, par, var), g in sorted(groups.items()):
        r = [p["speed_ratio"] for p in g]
        plain = [p["plain_steady_ms"] for p in g]
        out.append(
            f"| {call} | {par} | {var} | {len(g)} | {statistics.median(r):.3f}× [{min(r):.3f}–{max(r):.3f}] "
            f"| {_ci95(r)} | {100 * (max(plain) / min(plain) - 1):.1f} % |"
        )
    for par in sorted({p["parallel"] for p in pairs}):
        r = [p["speed_ratio"] for p in pairs if p["parallel"] == par and p["online_variant"] == "default"]
        if r:
            out.append(
                f"| all | {par} | default | {len(r)} | **{statistics.median(r):.3f}×** "
                f"[{min(r):.3f}–{max(r):.3f}] | {_ci95(r)} | |"
            )
    return "\n".join(out) + "\n"


def _plot(iters: list[dict[str, Any]], path: Path) -> None:
    keys = sorted({(i["call"], i["pair"], i["variant"], i["parallel"]) for i in iters})
    fig, axes = plt.subplots(len(keys), 1, figsize=(8, 1.9 * len(keys)), sharex=True, squeeze=False)
    for ax, (call, pair, var, par) in zip(axes[:, 0], keys, strict=True):
        for it in iters:
            if (it["call"], it["pair"], it["variant"], it["parallel"]) != (call, pair, var, par):
                continue
            ms = np.asarray(it["iter_ms"][2:])  # the first two steps are start-up
            smooth = [float(np.median(ms[max(0, k - 9) : k + 1])) for k in range(len(ms))]
            ax.plot(range(2, 2 + len(ms)), smooth, label="plain NCCL" if it["mode"] == "nccl" else "online")
        # scale to the steady steps: start-up and the first tuning steps would flatten the rest
        steady = np.concatenate([np.asarray(i["iter_ms"][5:]) for i in iters if i.get("parallel") == par])
        lo, hi = np.percentile(steady, [1, 99])
        ax.set_ylim(0.9 * lo, 1.1 * hi)
        ax.set_title(f"{call} {pair} {par} ({var})", fontsize=8)
        ax.set_ylabel("ms/step")
        ax.legend(fontsize=7, loc="upper right")
    axes[-1, 0].set_xlabel("iteration (rolling median of 10)")
    fig.tight_layout()
    fig.savefig(path, dpi=60)
    plt.close(fig)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or any("=" not in a for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    pairs: list[dict[str, Any]] = []
    iters: list[dict[str, Any]] = []
    for spec in argv[1:]:
        call, folder = spec.split("=", 1)
        if not Path(folder).is_dir():
            print(f"train_pairs: {folder} is not a folder", file=sys.stderr)
            return 2
        p, i = _rows(call, Path(folder))
        pairs += p
        iters += i
    if not pairs:
        print("train_pairs: no pair*_<variant>.json with both plain and online launches", file=sys.stderr)
        return 1
    with open(out / "pairs.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(pairs[0]))
        w.writeheader()
        w.writerows(pairs)
    (out / "iterations.json").write_text(json.dumps(iters, separators=(",", ":")))
    (out / "summary.md").write_text(_summary(pairs))
    _plot(iters, out / "steps.png")
    print((out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
