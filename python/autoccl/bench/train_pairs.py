"""`autoccl bench train-pairs`: interleaved launch pairs of `autoccl bench train` summarised.

Each `bench train --modes nccl,online` result is one launch pair per parallel kind: a plain-NCCL launch,
then an online one. One pair says little, because two launches of plain NCCL alone can land far apart;
over several pairs, the median of the speed ratios and its bootstrap interval say whether online is
faster, and plain's own spread between pairs says how far apart launches land anyway.

A pair whose online launch fell back to NCCL's own choice (tuned configurations were tried, every
recurring task ended on NCCL's choice, the step guard's fall-back or searches that found nothing better,
and at least 90 % of every such task's calls in the measured second half on NCCL's choice,
`trace.fell_back_to_nccl`) ran NCCL's configurations there: by the bar's rule it counts as
1.00×, unless it was slower by more than the baseline moved between pairs. The measured ratio, which then
shows the plugin's presence, the guard's re-check rounds and the machine's drift, is reported beside it."""

from __future__ import annotations

import json
import math
import re
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoccl.bench import trace as T
from autoccl.bench.nccl_tests import BenchError, beyond_spread, bootstrap_interval
from autoccl.figures import save_figure

# The bar a training gain is held to: the median speed ratio over enough independent pairs.
BAR_RATIO = 1.00
TARGET_RATIO = 1.05
BAR_MIN_PAIRS = 5
ROLLING_WINDOW = 10

# Settings that make two pairs the same experiment; a pair differing in one is reported, not refused.
_SAME_EXPERIMENT = (
    "preset",
    "iters",
    "batch",
    "seq",
    "dtype",
    "world_size",
    "bucket_mb",
    "online_channel_ceiling",
    "online_nccl_channels",
)


@dataclass(frozen=True)
class LaunchSteps:
    """One launch of a pair: its steady step (median of the second half) and every step's time."""

    parallel: str
    mode: str
    steady_ms: float
    iter_ms: tuple[float, ...]
    search_end_iter: int | None
    # the launch fell back to NCCL's choice (trace.fell_back_to_nccl; None: no trace says)
    fell_back_to_nccl: bool | None = None
    # the step guard's verdicts in the launch (`bench train`'s guard_verdicts: at, winner, both medians in
    # microseconds with their samples, the margin); empty where the row has none
    guard_verdicts: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Pair:
    """One `bench train` result: a launch per parallel kind and mode."""

    name: str
    path: Path
    launches: tuple[LaunchSteps, ...]
    settings: Mapping[str, Any]
    host: Mapping[str, Any]
    command: str
    created: str

    def launch(self, parallel: str, mode: str) -> LaunchSteps | None:
        return next((ln for ln in self.launches if ln.parallel == parallel and ln.mode == mode), None)


# ------------------------------------------------------------------------------------------------ reading


def _natural_key(path: Path) -> list[Any]:
    """pair2 before pair10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", path.name)]


def _load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise BenchError(f"{path} cannot be read: {e}") from None
    except json.JSONDecodeError as e:
        raise BenchError(f"{path} is not JSON ({e})") from None


def _is_train_doc(doc: Any) -> bool:
    return (
        isinstance(doc, dict) and isinstance(doc.get("train"), list) and doc.get("kind", "train") == "train"
    )


def _expand(paths: Iterable[Path | str]) -> list[Path]:
    """Files as given; a folder stands for every `bench train` JSON directly in it, in name order."""
    files: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = [f for f in sorted(path.glob("*.json"), key=_natural_key) if _is_train_doc(_load_json(f))]
            if not found:
                raise BenchError(f"{path} holds no `autoccl bench train` result (a *.json with a train list)")
            files += found
        elif path.is_file():
            files.append(path)
        else:
            raise BenchError(f"{path} does not exist")
    unique: dict[Path, Path] = {}
    for f in files:
        unique.setdefault(f.resolve(), f)
    return list(unique.values())


def _pair_names(files: Sequence[Path]) -> list[str]:
    """File stems, with the folder in front where two folders hold files of the same name."""
    stems = [f.stem for f in files]
    if len(set(stems)) == len(stems):
        return stems
    return [f"{f.parent.name}/{f.stem}" for f in files]


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _read_pair(path: Path, name: str) -> Pair:
    doc = _load_json(path)
    if not _is_train_doc(doc):
        raise BenchError(f"{path} is not an `autoccl bench train` result (it has no train list)")
    steps: dict[tuple[str, str], list[float]] = {}
    for it in doc.get("iterations") or []:
        if isinstance(it, dict) and isinstance(it.get("iter_ms"), list):
            # a step without a number is null (NaN in files of earlier versions)
            steps[(str(it.get("parallel")), str(it.get("mode")))] = [
                math.nan if x is None else float(x) for x in it["iter_ms"]
            ]
    launches: list[LaunchSteps] = []
    for index, row in enumerate(doc["train"]):
        steady = _number(row.get("steady_ms")) if isinstance(row, dict) else None
        if steady is None and isinstance(row, dict) and "steady_ms" in row and row["steady_ms"] is None:
            steady = math.nan  # no steady step (null; NaN before): left out of its kind with a warning below
        if steady is None or not row.get("parallel") or not row.get("mode"):
            raise BenchError(f"{path}: train row {index} lacks parallel, mode or steady_ms")
        key = (str(row["parallel"]), str(row["mode"]))
        if any((ln.parallel, ln.mode) == key for ln in launches):
            raise BenchError(
                f"{path} has more than one {key[0]}/{key[1]} launch (a resilience comparison?); "
                "a launch pair has one launch per parallel kind and mode"
            )
        end = _number(row.get("search_end_iter"))
        iter_ms = tuple(steps.get(key, []))
        launches.append(
            LaunchSteps(
                parallel=key[0],
                mode=key[1],
                steady_ms=steady,
                iter_ms=iter_ms,
                search_end_iter=None if end is None else int(end),
                fell_back_to_nccl=_fell_back_to_nccl(row, doc, len(iter_ms)),
                guard_verdicts=tuple(v for v in row.get("guard_verdicts") or [] if isinstance(v, dict)),
            )
        )
    return Pair(
        name=name,
        path=path,
        launches=tuple(launches),
        settings=doc.get("settings") if isinstance(doc.get("settings"), dict) else {},
        host=doc.get("host") if isinstance(doc.get("host"), dict) else {},
        command=str(doc.get("command") or ""),
        created=str(doc.get("created") or ""),
    )


def _fell_back_to_nccl(row: Mapping[str, Any], doc: Mapping[str, Any], iters: int) -> bool | None:
    """The row's own verdict (`bench train` writes it), else one from the launch's task convergence in the
    same file (results written before the row carried it)."""
    if isinstance(row.get("fell_back_to_nccl"), bool):
        return bool(row["fell_back_to_nccl"])
    for entry in doc.get("launches") or []:
        if isinstance(entry, dict) and entry.get("label") == row.get("launch"):
            conv = entry.get("convergence")
            if isinstance(conv, list) and conv:
                found = T.fell_back_to_nccl(conv, iters)
                return None if found is None else bool(found["fell_back_to_nccl"])
    return None


def read_pairs(paths: Iterable[Path | str]) -> list[Pair]:
    """Every `bench train` result of `paths` (files, or folders of them) as a pair, in the order given."""
    files = _expand(paths)
    if not files:
        raise BenchError("no result files given")
    return [_read_pair(f, name) for f, name in zip(files, _pair_names(files), strict=True)]


# ---------------------------------------------------------------------------------------------- summary


def drift(iter_ms: Sequence[float]) -> float | None:
    """Median of the last quarter of a launch's steps over the median of its second quarter: above 1, the
    steps grew during the run (a launch that slows down skews a ratio of second halves). None below 4
    steps."""
    n = len(iter_ms)
    if n < 4:
        return None
    second, last = statistics.median(iter_ms[n // 4 : n // 2]), statistics.median(iter_ms[3 * n // 4 :])
    return last / second if second > 0 else None


def _median_ci(ratios: Sequence[float]) -> list[float] | None:
    """95 % bootstrap interval of the median over pairs; none with fewer than two pairs."""
    if len(ratios) < 2:
        return None
    lo, hi = bootstrap_interval([[r] for r in ratios], lambda drawn: statistics.median(d[0] for d in drawn))
    return [lo, hi]


def counted_ratio(speed_ratio: float, fell_back_to_nccl: bool | None, slower_beyond_spread: bool) -> float:
    """The ratio the bar counts: 1.00 for a launch that fell back to NCCL's choice, unless it lost more than
    the baseline moves between launches (then something beyond noise made it slower: the measured one)."""
    return 1.0 if fell_back_to_nccl and not slower_beyond_spread else speed_ratio


def _bar(count: int, median: float) -> str:
    if count < BAR_MIN_PAIRS:
        return "too few pairs"
    return "met" if median >= BAR_RATIO else "not met"


def _setting_differences(pairs: Sequence[Pair]) -> list[str]:
    first = pairs[0]
    out = []
    for p in pairs[1:]:
        keys = [k for k in _SAME_EXPERIMENT if p.settings.get(k) != first.settings.get(k)]
        diffs = [f"{k} {p.settings.get(k)} against {first.settings.get(k)}" for k in keys]
        if p.host.get("gpus") != first.host.get("gpus"):
            diffs.append(f"GPUs {p.host.get('gpus')} against {first.host.get('gpus')}")
        if diffs:
            out.append(f"{p.name} was measured otherwise than {first.name}: {'; '.join(diffs)}")
    return out


def _first_launched(p: Pair, baseline: str, mode: str) -> str | None:
    """Which of the two modes the pair launched first (`bench train` launches its modes in the order given),
    None where its settings do not say."""
    modes = p.settings.get("modes")
    if not isinstance(modes, list) or baseline not in modes or mode not in modes:
        return None
    return baseline if modes.index(baseline) < modes.index(mode) else mode


def _order_sentence(rows: Sequence[Mapping[str, Any]], baseline: str, mode: str) -> list[str]:
    """Where pairs launched the two modes in both orders: the median speed of each order, so that what the
    launch order alone does (a machine that slows or warms over a pair) shows beside the modes' difference."""
    by = {m: [r["speed_ratio"] for r in rows if r.get("first") == m] for m in (baseline, mode)}
    if not by[baseline] or not by[mode]:
        return []
    return [
        "",
        f"By launch order: {_x(statistics.median(by[baseline]))} median over {len(by[baseline])} pairs "
        f"with {baseline} launched first, {_x(statistics.median(by[mode]))} over {len(by[mode])} with "
        f"{mode} first.",
    ]


def summarize(pairs: Sequence[Pair], baseline: str = "nccl", mode: str = "online") -> dict[str, Any]:
    """Per parallel kind, over the pairs that have both launches: each pair's speed ratio (baseline steady
    ms / mode steady ms, above 1: `mode` faster) and drift, their median with a 95 % bootstrap interval,
    min/max, and the baseline's own spread between pairs (max/min - 1 of its steady ms); each pair's counted
    ratio (1.00 where the mode's launch fell back to NCCL's choice and lost no more than that spread) and
    their median, which the bar judges. A pair lacking one of the two launches of a kind is left out of that
    kind with a warning; no kind left is an error."""
    if not pairs:
        raise BenchError("no pairs to summarise")
    warnings = _setting_differences(pairs)
    kinds = list(dict.fromkeys(ln.parallel for p in pairs for ln in p.launches))
    parallels: dict[str, Any] = {}
    for par in kinds:
        rows: list[dict[str, Any]] = []
        for p in pairs:
            base, other = p.launch(par, baseline), p.launch(par, mode)
            if base is None or other is None:
                missing = " and ".join(m for m, ln in ((baseline, base), (mode, other)) if ln is None)
                warnings.append(f"{p.name}: no {par}/{missing} launch; left out of {par}")
                continue
            if not (base.steady_ms > 0 and other.steady_ms > 0):
                warnings.append(f"{p.name}: {par} has no positive steady step; left out of {par}")
                continue
            speed = base.steady_ms / other.steady_ms
            rows.append(
                {
                    "pair": p.name,
                    "first": _first_launched(p, baseline, mode),
                    "baseline_steady_ms": base.steady_ms,
                    "mode_steady_ms": other.steady_ms,
                    "speed_ratio": speed,
                    "fell_back_to_nccl": other.fell_back_to_nccl,
                    "guard_verdicts": [dict(v) for v in other.guard_verdicts],
                    "search_end_iter": other.search_end_iter,
                    "baseline_drift": drift(base.iter_ms),
                    "mode_drift": drift(other.iter_ms),
                }
            )
        if not rows:
            continue
        ratios: list[float] = [r["speed_ratio"] for r in rows]
        plain: list[float] = [r["baseline_steady_ms"] for r in rows]
        spread = max(plain) / min(plain) - 1 if len(plain) > 1 else None
        for r in rows:
            # Slower by more than two launches of the baseline alone differ; with one pair that is unknown.
            r["slower_beyond_spread"] = beyond_spread(r["speed_ratio"], spread, below=1.0)
            r["counted_ratio"] = counted_ratio(
                r["speed_ratio"], r["fell_back_to_nccl"], r["slower_beyond_spread"]
            )
        median = statistics.median(ratios)
        counted: list[float] = [r["counted_ratio"] for r in rows]
        counted_median = statistics.median(counted)
        parallels[par] = {
            "pairs": rows,
            "count": len(rows),
            "median": median,
            "ci95": _median_ci(ratios),
            "min": min(ratios),
            "max": max(ratios),
            "fell_back_count": sum(1 for r in rows if r["fell_back_to_nccl"]),
            "counted_median": counted_median,
            "counted_ci95": _median_ci(counted),
            "baseline_spread": spread,
            "bar": _bar(len(rows), counted_median),
            "target_reached": counted_median >= TARGET_RATIO,
        }
    if not parallels:
        found = sorted({ln.mode for p in pairs for ln in p.launches})
        raise BenchError(
            f"no pair has both a {baseline} and a {mode} launch of the same parallel kind "
            f"(modes found: {', '.join(found) or 'none'})"
        )
    first = pairs[0]
    return {
        "baseline": baseline,
        "mode": mode,
        "bar": {"median_at_least": BAR_RATIO, "target": TARGET_RATIO, "min_pairs": BAR_MIN_PAIRS},
        "parallels": parallels,
        "warnings": warnings,
        "settings": dict(first.settings),
        "host": dict(first.host),
        "files": [
            {"pair": p.name, "path": str(p.path), "command": p.command, "created": p.created} for p in pairs
        ],
    }


def _label(mode: str) -> str:
    """The column name of a mode: the baseline `nccl` is plain NCCL."""
    return "plain" if mode == "nccl" else re.sub(r"\W+", "_", mode)


def csv_rows(summary: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per pair and parallel kind."""
    b, m = _label(summary["baseline"]), _label(summary["mode"])
    out = []
    for par, s in summary["parallels"].items():
        for r in s["pairs"]:
            out.append(
                {
                    "pair": r["pair"],
                    "parallel": par,
                    f"{b}_steady_ms": round(r["baseline_steady_ms"], 3),
                    f"{m}_steady_ms": round(r["mode_steady_ms"], 3),
                    "speed_ratio": round(r["speed_ratio"], 4),
                    "fell_back_to_nccl": r["fell_back_to_nccl"],
                    "counted_ratio": round(r["counted_ratio"], 4),
                    "search_end_iter": r["search_end_iter"],
                    "first_launched": r.get("first"),
                    f"{b}_drift": None if r["baseline_drift"] is None else round(r["baseline_drift"], 4),
                    f"{m}_drift": None if r["mode_drift"] is None else round(r["mode_drift"], 4),
                }
            )
    return out


def iterations(summary: Mapping[str, Any], pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Per pair and parallel kind of the summary: every step's ms of both launches."""
    by_name = {p.name: p for p in pairs}
    out = []
    for par, s in summary["parallels"].items():
        for r in s["pairs"]:
            p = by_name[r["pair"]]
            out.append(
                {
                    "pair": p.name,
                    "parallel": par,
                    "iter_ms": {
                        m: list(ln.iter_ms)
                        for m in (summary["baseline"], summary["mode"])
                        if (ln := p.launch(par, m)) is not None
                    },
                }
            )
    return out


# ------------------------------------------------------------------------------------------------ report


def _x(v: float | None, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}×"


def _drift_text(v: float | None) -> str:
    return "—" if v is None else f"{v:.3f}"


def _bar_sentence(s: Mapping[str, Any]) -> str:
    rule = (
        f"**Bar** (median ≥ {BAR_RATIO:.2f}×, target ≥ {TARGET_RATIO:.2f}×, over ≥ {BAR_MIN_PAIRS} pairs, "
        "a fall-back to NCCL's choice counted as 1.00×): "
    )
    fell = s["fell_back_count"]

    def medians(word: str) -> str:
        if not fell:
            return f"{word} {_x(s['median'])}"
        ci = s["counted_ci95"]
        interval = f" [95 % {ci[0]:.3f}–{ci[1]:.3f}]" if ci else ""
        return f"counted {word} {_x(s['counted_median'])}{interval}, measured {_x(s['median'])}"

    note = f"; {fell} of {s['count']} launches fell back to NCCL's choice" if fell else ""
    if s["bar"] == "too few pairs":
        return rule + f"too few pairs, {s['count']} of {BAR_MIN_PAIRS} ({medians('median so far')}{note})."
    median = medians("median")
    if s["bar"] == "met":
        target = "reached" if s["target_reached"] else "not reached"
        return rule + f"met, {median} over {s['count']} pairs{note}; the target is {target}."
    return rule + f"not met, {median} over {s['count']} pairs{note}."


def guard_text(v: Mapping[str, Any]) -> str:
    """One step guard verdict: what won from which of its iterations (the guard's own count, which starts once
    the communicator's calls repeat, not the training step), and the medians it compared."""
    winner = str(v.get("winner"))
    won = {"tuned": "kept the tuned plan", "nccl": "NCCL's choice"}.get(winner, winner)
    if v.get("winner_positions"):  # an estimated arm: the positions it caps
        won += " on positions " + ",".join(str(p) for p in v["winner_positions"])
    t, n = float(v.get("tuned_us") or 0), float(v.get("nccl_us") or 0)
    medians = (
        f"tuned {t / 1000:.1f} ms ×{v.get('tuned_samples', 0)} against NCCL's {n / 1000:.1f} ms "
        f"×{v.get('nccl_samples', 0)}, needed {100 * float(v.get('margin') or 0):.1f} %"
        if t > 0 and n > 0
        else f"too few samples ({v.get('tuned_samples', 0)} tuned, {v.get('nccl_samples', 0)} NCCL's)"
    )
    if v.get("unexplained"):
        medians += (
            f"; the plan saves {float(v.get('plan_gain_us') or 0) / 1000:.2f} ms of kernel time a step: noise"
        )
    voided = int(v.get("voided_before") or 0)
    if voided:
        medians += f"; {voided} earlier round{'s' if voided > 1 else ''} void: the iteration grew"
    cost = float(v.get("cost_us") or 0)
    if cost > 0:  # what the round's blocks of the losing arm cost against the winner
        medians += f"; the round cost {cost / 1000:.1f} ms"
    comm = f" of comm …{str(v['comm'])[-6:]}" if v.get("comm") else ""
    return f"{won} from guard iteration {v.get('at')}{comm} ({medians})"


def _guard_lines(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Under a table: each pair's step guard verdicts, from the launch's trace (none: no line)."""
    found = [(r["pair"], r.get("guard_verdicts") or []) for r in rows]
    if not any(v for _, v in found):
        return []
    head = "Step guard verdicts (median iteration time of its round's blocks, the tuned plan against NCCL's):"
    lines = ["", head, ""]
    for pair, verdicts in found:
        lines.append(f"- {pair}: " + ("; ".join(guard_text(v) for v in verdicts) if verdicts else "none"))
    return lines


def markdown(summary: Mapping[str, Any]) -> str:
    """A table per parallel kind (one row per pair, then the median row) and the bar's verdict under it."""
    base, mode = summary["baseline"], summary["mode"]
    st, host = summary.get("settings", {}), summary.get("host", {})
    gpus = host.get("gpus") or []
    what = ", ".join(
        x
        for x in (
            f"preset {st['preset']}" if st.get("preset") else "",
            f"{st['iters']} iterations a launch" if st.get("iters") else "",
            f"{len(gpus)} × {gpus[0]}" if gpus else "",
            # gloo loads neither NCCL nor the plugin: both launches of a pair ran the same collectives
            "gloo, not NCCL" if st.get("backend") == "gloo" else "",
        )
        if x
    )
    lines = [
        f"# `autoccl bench train` launch pairs: {mode} against {base}" + (f" ({what})" if what else ""),
        "",
        f"Speed = {base} steady ms / {mode} steady ms (above 1: {mode} faster); steady = the median step of "
        "a launch's second half. Drift = median of a launch's last quarter / median of its second quarter "
        "(above 1: its steps grew during the run). Counted = speed, or 1.000× where the "
        f"{mode} launch fell back to NCCL's own choice (it tried tuned configurations, ended with every "
        "recurring task on NCCL's choice and ran it for 90 % of its second half or more; the bar counts a "
        f"fall-back as 1.00×, not as a failure, unless it lost more than {base} moved between pairs).",
    ]
    for par, s in summary["parallels"].items():
        lines += [
            "",
            f"## {par}",
            "",
            f"| pair | {base} ms/iter | {mode} ms/iter | speed | fell back to NCCL's choice | counted "
            f"| search ended at iter | {base} drift | {mode} drift | slower beyond {base}'s spread |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | --- |",
        ]
        for r in s["pairs"]:
            end = "—" if r["search_end_iter"] is None else str(r["search_end_iter"])
            ended = {True: "yes", False: "no", None: "—"}[r["fell_back_to_nccl"]]
            lines.append(
                f"| {r['pair']} | {r['baseline_steady_ms']:.2f} | {r['mode_steady_ms']:.2f} "
                f"| {_x(r['speed_ratio'])} | {ended} | {_x(r['counted_ratio'])} | {end} "
                f"| {_drift_text(r['baseline_drift'])} "
                f"| {_drift_text(r['mode_drift'])} | {'**yes**' if r['slower_beyond_spread'] else ''} |"
            )
        ci = s["ci95"]
        interval = f"95 % {ci[0]:.3f}–{ci[1]:.3f}" if ci else "no interval from one pair"
        med = statistics.median
        lines.append(
            f"| **median of {s['count']}** | {med(r['baseline_steady_ms'] for r in s['pairs']):.2f} "
            f"| {med(r['mode_steady_ms'] for r in s['pairs']):.2f} "
            f"| **{_x(s['median'])}** ({interval}; min–max {s['min']:.3f}–{s['max']:.3f}) "
            f"| {s['fell_back_count']} of {s['count']} | **{_x(s['counted_median'])}** | | | | |"
        )
        lines += _order_sentence(s["pairs"], base, mode)
        lines += _guard_lines(s["pairs"])
        spread = s["baseline_spread"]
        lines += [
            "",
            f"{base}'s own steady step moved {100 * spread:.1f} % between pairs (max/min − 1)."
            if spread is not None
            else f"One pair: {base}'s own spread between launches is unknown.",
            "",
            _bar_sentence(s),
        ]
    if summary.get("warnings"):
        lines += ["", "Left out or differing:", ""] + [f"- {w}" for w in summary["warnings"]]
    return "\n".join(lines) + "\n"


def _rolling_median(xs: Sequence[float], window: int = ROLLING_WINDOW) -> list[float]:
    return [statistics.median(xs[max(0, k - window + 1) : k + 1]) for k in range(len(xs))]


def plot(summary: Mapping[str, Any], pairs: Sequence[Pair], path: Path) -> Path:
    """Left: each pair's speed ratio per parallel kind (hollow: the launch fell back to NCCL's choice), the
    median as a bar (the counted median dashed where it differs), 1.0 and the target as lines.
    Right, one panel per kind: every launch's step time as a rolling median of 10 steps (baseline solid,
    mode dashed, one colour per pair), the axis fitted to the steps after start-up."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    base, mode = summary["baseline"], summary["mode"]
    kinds = list(summary["parallels"])
    names = list(dict.fromkeys(r["pair"] for s in summary["parallels"].values() for r in s["pairs"]))
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")

    def colour(name: str) -> Any:
        return cmap(names.index(name) % cmap.N)

    by_name = {p.name: p for p in pairs}

    fig = plt.figure(figsize=(10, 6))
    grid = fig.add_gridspec(len(kinds), 2, width_ratios=[1, 2.2])
    ax = fig.add_subplot(grid[:, 0])
    for i, par in enumerate(kinds):
        s = summary["parallels"][par]
        n = len(s["pairs"])
        for j, r in enumerate(s["pairs"]):
            offset = 0.0 if n == 1 else -0.25 + 0.5 * j / (n - 1)
            face = "none" if r["fell_back_to_nccl"] else colour(r["pair"])
            ax.plot(i + offset, r["speed_ratio"], "o", color=colour(r["pair"]), mfc=face, ms=6)
        ax.hlines(s["median"], i - 0.35, i + 0.35, color="black", lw=2)
        if s["fell_back_count"]:
            ax.hlines(s["counted_median"], i - 0.35, i + 0.35, color="0.5", lw=1.5, ls="--")
    ax.axhline(1.0, color="0.4", lw=0.8)
    ax.axhline(TARGET_RATIO, color="tab:green", lw=0.8, ls=":")
    ax.set_xticks(range(len(kinds)))
    ax.set_xticklabels([f"{k}\n({summary['parallels'][k]['count']} pairs)" for k in kinds])
    ax.set_xlim(-0.6, len(kinds) - 0.4)
    ax.set_ylabel(f"{base} ms / {mode} ms (above 1: {mode} faster)")
    ax.set_title("speed per pair, median as a bar", fontsize=9)
    handles = [Line2D([], [], marker="o", ls="", color=colour(nm), label=nm) for nm in names[:12]]
    handles += [
        Line2D([], [], color="black", lw=2, label="median"),
        Line2D([], [], marker="o", ls="", color="0.3", mfc="none", label="fell back to NCCL's choice"),
        Line2D([], [], color="0.5", lw=1.5, ls="--", label="counted median"),
        Line2D([], [], color="tab:green", lw=0.8, ls=":", label=f"target {TARGET_RATIO:.2f}×"),
    ]
    ax.legend(handles=handles, fontsize=7, loc="best")

    for i, par in enumerate(kinds):
        cax = fig.add_subplot(grid[i, 1])
        settled: list[float] = []
        for r in summary["parallels"][par]["pairs"]:
            for m, style in ((base, "-"), (mode, "--")):
                ln = by_name[r["pair"]].launch(par, m)
                if ln is None or not ln.iter_ms:
                    continue
                smooth = _rolling_median(ln.iter_ms)
                cax.plot(range(len(smooth)), smooth, ls=style, lw=1, color=colour(r["pair"]))
                settled += smooth[ROLLING_WINDOW:]
        if settled:
            # Start-up steps are many times the rest: fitting the axis to them flattens every curve.
            qs = statistics.quantiles(settled, n=100) if len(settled) > 1 else [settled[0]] * 99
            lo, hi = qs[0], qs[-1]
            if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
                cax.set_ylim(0.95 * lo, 1.05 * hi)
        cax.set_title(f"{par}: ms/step, rolling median of {ROLLING_WINDOW}", fontsize=9)
        cax.set_ylabel("ms")
        if i == len(kinds) - 1:
            cax.set_xlabel("iteration")
        if i == 0:
            cax.legend(
                handles=[
                    Line2D([], [], color="black", ls="-", label=base),
                    Line2D([], [], color="black", ls="--", label=mode),
                ],
                fontsize=7,
                loc="upper right",
            )
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)
    return path
