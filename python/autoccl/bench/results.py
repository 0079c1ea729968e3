"""The result document (docs/bench.md), derived rows (oracle best, static-best choice), and the
JSON / CSV / markdown writers. Pure: no torch."""

from __future__ import annotations

import csv
import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from autoccl import jsonout
from autoccl.bench import trace as T
from autoccl.bench.exposure_truth import verdict_counts_text
from autoccl.bench.modes import geomean
from autoccl.bench.spec import PLUGIN_COLL, SHORT, cell_key, format_size
from autoccl.jsonout import finite_number

SCHEMA = "autoccl-bench/1"

# Scalar row fields written to CSV, in this order (missing ones are left empty).
CSV_FIELDS = (
    "mode",
    "launch",
    "phase",
    "config",
    "coll",
    "bytes",
    "dtype",
    "world_size",
    "load",
    "time_us",
    "time_us_min",
    "time_us_max",
    "time_us_q1",
    "time_us_q3",
    "algbw_gbs",
    "busbw_gbs",
    "busbw_gbs_min",
    "busbw_gbs_max",
    "warmup",
    "iters",
    "reps",
    "gemm_reps",
    "gemm_us",
    "gemm_load_us",
    "gemm_slowdown",
    "comm_load_us",
    "busbw_load_gbs",
    "comm_slowdown",
    "span_ms",
    "serial_ms",
    "overlap",
    "check",
    "check_err",
    "skipped",
)


class ResultError(ValueError):
    pass


def error_summary(error: str) -> str:
    """One line for a failed launch: the error's first line and, where a log's tail follows it, the tail's
    last line (the worker's exception), not the first line alone (which ends in "end of <log>:")."""
    lines = [ln.strip() for ln in (error or "").splitlines() if ln.strip()]
    if not lines:
        return ""
    return lines[0] if len(lines) == 1 else f"{lines[0]} … {lines[-1]}"


def _first_line(path: str | Path) -> Any:
    """The first line of a JSON-lines file, parsed; None where it is not one."""
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.readline())
    except (OSError, ValueError):
        return None


def _looks_like_trace(path: str | Path) -> bool:
    """A plugin trace: one JSON object a line, its records keyed by "ev"."""
    first = _first_line(path)
    return isinstance(first, dict) and "ev" in first


def _looks_like_launches(path: str | Path) -> bool:
    """`bench nccl-tests`' launches.jsonl: one record a launch, with its mode and nccl-tests' rows."""
    first = _first_line(path)
    return isinstance(first, dict) and {"mode", "rows", "launch"} <= first.keys()


def load_doc(path: str | Path) -> dict[str, Any]:
    try:
        doc: dict[str, Any] = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ResultError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:  # JSON or UTF-8 decoding
        if _looks_like_trace(path):
            raise ResultError(
                f"{path} is a plugin trace (JSON lines), not a bench result: `autoccl report --trace {path}`"
            ) from None
        if _looks_like_launches(path):
            raise ResultError(
                f"{path} holds a `bench nccl-tests` run's launches, not a bench result: its folder's summary "
                f"is `autoccl bench nccl-tests --report-only -o {Path(path).parent}`"
            ) from None
        raise ResultError(f"cannot read {path}: not JSON ({e})") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise ResultError(f"{path} is not an autoccl bench result (schema {SCHEMA})")
    why = _shape_problem(doc)
    if why:
        raise ResultError(f"{path} is not a readable bench result: {why}")
    return doc


# The fields of a coll row that the tables and plots index it by.
_COLL_ROW_FIELDS = (("coll", str), ("bytes", int), ("load", str), ("mode", str))


def _shape_problem(doc: dict[str, Any]) -> str | None:
    """What in a result document (schema already checked) the report could not read, as a clause; None
    when nothing: its lists of rows and iterations hold objects, and a coll row says its cell and mode."""
    for key in ("rows", "iterations", "launches"):
        value = doc.get(key, [])
        if not isinstance(value, list):
            return f"{key!r} is {type(value).__name__}, not a list"
        at = next((i for i, x in enumerate(value) if not isinstance(x, dict)), None)
        if at is not None:
            return f"{key}[{at}] is {type(value[at]).__name__}, not an object"
    if doc.get("kind") == "coll":
        for i, row in enumerate(doc.get("rows", [])):
            for name, kind in _COLL_ROW_FIELDS:
                v = row.get(name)
                if not isinstance(v, kind) or isinstance(v, bool):
                    what = "missing" if v is None else f"{type(v).__name__}, not {kind.__name__}"
                    return f"rows[{i}] has no {name!r} ({what})"
    return None


def valid(row: dict[str, Any]) -> bool:
    return not row.get("skipped") and row.get("check") != "FAIL" and finite_number(row.get("busbw_gbs"))


def score(row: dict[str, Any]) -> float:
    """Higher is better, comparable within one cell: busbw without load; with a load the pair's
    throughput (1 / makespan of the same collectives + GEMMs), the objective that matters there."""
    if row.get("load", "none") == "none":
        return float(row["busbw_gbs"])
    span = row.get("span_ms")
    if isinstance(span, (int, float)) and math.isfinite(span) and span > 0:
        return 1.0 / float(span)
    return math.nan


def cells_of(rows: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {cell_key(r["coll"], r["bytes"], r["load"]): r for r in rows}


def oracle_best(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per cell, the best of the oracle sweep's launches (rows of mode oracle, phase sweep)."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r.get("mode") != "oracle" or r.get("phase") != "sweep" or not valid(r):
            continue
        key = cell_key(r["coll"], r["bytes"], r["load"])
        if key not in best or score(r) > score(best[key]):
            best[key] = r
    out = []
    for r in best.values():
        d = dict(r)
        d["phase"] = "best"
        out.append(d)
    return out


def oracle_picks(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per load, each cell's sweep pick as a fixed-mode rule (what the re-measurement forces): `coll`,
    `bytes`, `rule` (e.g. `ring/ll/16`; None where the winning launch left this collective to NCCL), the
    sweep `launch` it came from and its sweep `score`."""
    out: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(oracle_best(rows), key=lambda r: (r["load"], r["coll"], int(r["bytes"]))):
        rules = dict(part.split(":", 1) for part in str(r.get("config", "")).split(";") if ":" in part)
        rule = rules.get(PLUGIN_COLL.get(r["coll"], ""))
        pick = {"coll": r["coll"], "bytes": int(r["bytes"]), "rule": rule, "launch": r.get("launch"),
                "score": score(r)}  # fmt: skip
        out.setdefault(str(r["load"]), []).append(pick)
    return out


def static_best_choice(rows: Sequence[dict[str, Any]], failed: Iterable[str] = ()) -> dict[str, Any] | None:
    """The sweep launch with the best geometric mean of per-cell scores normalised by the best score of
    the cell (busbw without load). A setting that failed, or lacks or skips a cell, is not eligible."""
    failed = set(failed)
    by_launch: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    configs: dict[str, str] = {}
    for r in rows:
        if r.get("mode") == "static-best" and r.get("phase") == "sweep":
            by_launch[r["launch"]][cell_key(r["coll"], r["bytes"], r["load"])] = r
            configs[r["launch"]] = r.get("config", "")
    if not by_launch:
        return None
    all_cells = set().union(*(set(c) for c in by_launch.values()))
    cell_best = {
        k: max((score(c[k]) for c in by_launch.values() if k in c and valid(c[k])), default=math.nan)
        for k in all_cells
    }
    table: list[dict[str, Any]] = []
    for label, cells in by_launch.items():
        ok = label not in failed and set(cells) == all_cells and all(valid(r) for r in cells.values())
        rel = geomean(score(r) / cell_best[k] for k, r in cells.items() if valid(r)) if ok else math.nan
        bw = geomean(float(r["busbw_gbs"]) for r in cells.values() if valid(r))
        table.append(
            {
                "launch": label,
                "config": configs[label],
                "eligible": ok,
                "geomean_rel_score": rel,
                "geomean_busbw_gbs": bw,
            }
        )
    for label in failed:
        if label not in by_launch:
            table.append(
                {
                    "launch": label,
                    "config": "",
                    "eligible": False,
                    "geomean_rel_score": math.nan,
                    "geomean_busbw_gbs": math.nan,
                }
            )
    eligible = [t for t in table if t["eligible"] and math.isfinite(t["geomean_rel_score"])]
    table.sort(key=_rank_key)
    if not eligible:
        return {"selected": None, "table": table}
    win = max(eligible, key=lambda t: t["geomean_rel_score"])
    return {"selected": win["launch"], "config": win["config"], "table": table}


def _rank_key(t: dict[str, Any]) -> float:
    v = float(t["geomean_rel_score"])
    return -v if math.isfinite(v) else math.inf


def summary_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows that represent each mode: measured rows of every mode (sweep rows excluded); for the
    oracle, a cell's re-measurement of its sweep pick where there is one, else the pick itself (`phase`
    best: the best of many noisy launches, biased upwards)."""
    rows = [r for r in doc.get("rows", []) if r.get("phase") != "sweep"]
    remeasured = {
        cell_key(r["coll"], r["bytes"], r["load"]) for r in rows if r.get("mode") == "oracle" and valid(r)
    }
    rows.extend(
        r
        for r in oracle_best(doc.get("rows", []))
        if cell_key(r["coll"], r["bytes"], r["load"]) not in remeasured
    )
    return rows


# Settings that parts of one matrix may split between files (each file measured some modes, collectives,
# sizes or loads); everything else must be equal for their cells to compare.
SPLIT_SETTINGS = frozenset(
    {
        "modes",
        "colls",
        "sizes",
        "loads",
        "static_space",
        "static_search",
        "static_best_from",
        "oracle_channels",
        "oracle_protos",
        "oracle_algos",
        "sweep_loads",
        "sweep_iters",
        "sweep_reps",
        "gemm_reps_from",
    }
)
HOST_KEYS = ("gpus", "nccl", "torch", "cuda", "driver")


def settings_differences(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> list[str]:
    """What differs between the files' settings (and hosts) beyond how a matrix is split: one line each."""
    out: list[str] = []
    first = docs[0]
    for doc, name in zip(docs[1:], names[1:], strict=True):
        a, b = first.get("settings", {}), doc.get("settings", {})
        for k in sorted(set(a) | set(b)):
            if k not in SPLIT_SETTINGS and a.get(k) != b.get(k):
                out.append(f"{k}: {a.get(k)!r} in {names[0]}, {b.get(k)!r} in {name}")
        ha, hb = first.get("host", {}) or {}, doc.get("host", {}) or {}
        for k in HOST_KEYS:
            if ha.get(k) != hb.get(k):
                out.append(f"host {k}: {ha.get(k)!r} in {names[0]}, {hb.get(k)!r} in {name}")
    return out


def merge_docs(
    docs: Sequence[dict[str, Any]], names: Sequence[str] | None = None, mix: bool = False
) -> dict[str, Any]:
    """Several result files (e.g. parts of one matrix run in separate commands) as one document: rows,
    launches and traces concatenated; settings and host of the first. The oracle best is recomputed
    over all oracle sweep rows, so an oracle split over files is one oracle (its per-file re-measurements
    are then left out: they measured each file's picks). Files whose settings differ
    beyond the split of a matrix (iterations, world size, dtype, GPUs, NCCL ...) are refused unless `mix`;
    then the document says what differs (`mixed`), and so does its markdown."""
    if not docs:
        raise ResultError("no results")
    if len(docs) == 1:
        return docs[0]
    names = list(names or [f"file {i + 1}" for i in range(len(docs))])
    differ = settings_differences(docs, names)
    if differ and not mix:
        raise ResultError(
            "the files were measured with different settings ("
            + "; ".join(differ[:3])
            + (f"; {len(differ) - 3} more" if len(differ) > 3 else "")
            + "): their cells do not compare; pass --mix to merge them anyway"
        )
    _refuse_overlap(docs, names)
    out = dict(docs[0])
    for key in ("rows", "launches", "warmup_traces", "iterations", "failures"):
        out[key] = [x for d in docs for x in d.get(key, [])]
    out["merged_from"] = [d.get("command") for d in docs]
    swept = [
        d for d in docs if any(r.get("mode") == "oracle" and r.get("phase") == "sweep" for r in d["rows"])
    ]
    if len(swept) > 1:
        # Each file re-measured its own picks: over the merged sweep the picks can differ, so the summary
        # falls back to the merged sweep's best (phase best, biased upwards) rather than a file's re-run.
        out["rows"] = [
            r for r in out["rows"] if not (r.get("mode") == "oracle" and r.get("phase") == "measure")
        ]
        out["oracle_picks"] = None
    if differ:
        out["mixed"] = differ
    return out


def _refuse_overlap(docs: Sequence[dict[str, Any]], names: Sequence[str]) -> None:
    """Files that split a matrix measure different cells: two files with a measured row of the same mode,
    collective, size and load would leave the tables to show one of the two and drop the other without a
    word (a file given twice, or two runs of the same modes). Sweep rows may overlap (an oracle split over
    files is one oracle), and so may the oracle's re-measurements where the merge leaves them out."""
    swept = sum(
        1 for d in docs if any(r.get("mode") == "oracle" and r.get("phase") == "sweep" for r in d["rows"])
    )
    seen: dict[tuple[Any, ...], int] = {}
    for i, doc in enumerate(docs):
        for r in doc.get("rows", []):
            if r.get("phase") == "sweep" or (swept > 1 and r.get("mode") == "oracle"):
                continue
            key = (r["mode"], r["coll"], r["bytes"], r["load"])
            first = seen.setdefault(key, i)
            if first == i:
                continue
            if names[first] == names[i]:
                raise ResultError(
                    f"{names[i]} is given twice: a merged table would hold each of its cells twice"
                )
            raise ResultError(
                f"{names[first]} and {names[i]} both measured {r['mode']} {r['coll']} "
                f"{format_size(int(r['bytes']))} under load {r['load']}: a merged table would show one of "
                "the two; report them apart"
            )


def gloo_caveat(doc: dict[str, Any]) -> str | None:
    """The caveat a CPU/gloo result carries in its tables: gloo never loads NCCL nor the plugin."""
    s = doc.get("settings", {})
    if s.get("backend") == "gloo" or s.get("device") == "cpu":
        return (
            "**gloo on the CPU: neither NCCL nor the autoccl plugin is loaded, so a ratio between modes "
            "compares two gloo runs (noise), never autoccl's effect on NCCL.**"
        )
    return None


def write_json(doc: dict[str, Any], path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(jsonout.dumps(doc, indent=1, default=_json_default))
    tmp.replace(path)


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"cannot serialise {type(o).__name__}")


def csv_text(rows: Sequence[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(CSV_FIELDS), extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _fmt_csv(r.get(k)) for k in CSV_FIELDS})
    return buf.getvalue()


def _fmt_csv(v: Any) -> Any:
    if isinstance(v, float):
        return f"{v:.6g}"
    return "" if v is None else v


def _modes_in(rows: Sequence[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for r in rows:
        if r["mode"] not in seen:
            seen.append(r["mode"])
    return seen


def coll_markdown(doc: dict[str, Any]) -> str:
    """busbw per mode (GB/s) for every (collective, load), with the speedup over `nccl`; under a load
    also the makespan of collective + GEMM."""
    rows = [r for r in summary_rows(doc) if not r.get("skipped")]
    modes = _modes_in(rows)
    s = doc.get("settings", {})
    host = doc.get("host", {})
    gpus = ", ".join(sorted(set(host.get("gpus") or ["cpu"])))
    # the versions the host had (a CPU run has no NCCL, CUDA or driver to name)
    versions = ", ".join(
        f"{name} {host[key]}"
        for name, key in (("torch", "torch"), ("NCCL", "nccl"), ("CUDA", "cuda"), ("driver", "driver"))
        if host.get(key)
    )
    lines = [
        f"# autoccl bench coll ({s.get('world_size')} x {gpus})",
        "",
        f"dtype {s.get('dtype')}, {s.get('iters')} iterations x {s.get('reps')} repetitions (median), "
        f"busbw in GB/s (nccl-tests convention)." + (f" {versions}." if versions else ""),
    ]
    if doc.get("static_best") and doc["static_best"].get("selected"):
        lines.append(f"\nstatic-best setting: `{doc['static_best'].get('config') or 'default'}`")
    caveat = gloo_caveat(doc)
    vs = " (gloo, not NCCL)" if caveat else ""
    if doc.get("status") in ("partial", "interrupted"):
        lines.append(f"\n**{doc['status']} run: only the launches that finished are in these tables.**")
    if doc.get("mixed"):
        lines.append("\n**merged from files with different settings:** " + "; ".join(doc["mixed"]))
    idx: dict[tuple[str, str, int, str], dict[str, Any]] = {
        (r["coll"], r["load"], r["bytes"], r["mode"]): r for r in rows
    }
    colls = list(dict.fromkeys(r["coll"] for r in rows))
    loads = list(dict.fromkeys(r["load"] for r in rows))
    sizes = sorted({r["bytes"] for r in rows})
    for load in loads:
        for coll in colls:
            present = [m for m in modes if any((coll, load, b, m) in idx for b in sizes)]
            if not present:
                continue
            lines += ["", f"## {coll} ({SHORT.get(coll, coll)}), load {load}", ""]
            if caveat:
                lines += [caveat, ""]
            head = ["size", *[f"{m} busbw" for m in present]]
            if load != "none":
                head += [f"{m} makespan ms" for m in present]
            if "nccl" in present:
                head += [f"{m} vs nccl{vs}" for m in present if m != "nccl"]
            lines.append("| " + " | ".join(head) + " |")
            lines.append("|" + "---|" * len(head))
            for b in sizes:
                if not any((coll, load, b, m) in idx for m in present):
                    continue
                cells = [format_size(b)]
                for m in present:
                    r = idx.get((coll, load, b, m))
                    key = "busbw_load_gbs" if load != "none" else "busbw_gbs"
                    cells.append(_bw(r[key]) if r and finite_number(r.get(key)) else "–")
                if load != "none":
                    for m in present:
                        r = idx.get((coll, load, b, m))
                        cells.append(f"{r['span_ms']:.2f}" if r and finite_number(r.get("span_ms")) else "–")
                if "nccl" in present:
                    base = idx.get((coll, load, b, "nccl"))
                    for m in present:
                        if m == "nccl":
                            continue
                        r = idx.get((coll, load, b, m))
                        sp = speedup(r, base) if r and base else math.nan
                        cells.append(f"{sp:.2f}x" if math.isfinite(sp) else "–")
                lines.append("| " + " | ".join(cells) + " |")
    fails = doc.get("failures") or []
    if fails:
        lines += ["", "## failed launches", ""]
        lines += [f"- `{f['launch']}`: {error_summary(f['error'])}" for f in fails]
    return "\n".join(lines) + "\n"


def speedup(row: dict[str, Any], base: dict[str, Any]) -> float:
    """Of `row` over `base` in the cell's objective (busbw without load, makespan with one)."""
    if not (valid(row) and valid(base)):
        return math.nan
    a, b = score(row), score(base)
    return a / b if b > 0 else math.nan


# A tuned train row's trade-off against plain NCCL (runner.tuning_tradeoff). Results written before the
# search cost was measured against plain NCCL's same iterations hold `tuning_cost_s` instead: shown as –.
_TUNING_KEYS = ("search_cost_s", "gain_ms", "break_even_iters")


def _second_half(r: dict[str, Any]) -> str:
    share = r.get("second_half_nccl_share")
    if not isinstance(share, (int, float)) or not finite_number(share):
        return ""
    return f" on {share * 100:.0f} % of its second half's calls"


def _apart(gain_ms: float) -> str:
    """A steady step's distance to plain NCCL's, in words (gain_ms > 0: faster)."""
    return f"{abs(gain_ms):.2f} ms/iter {'faster' if gain_ms > 0 else 'slower'} than plain NCCL's"


def _never_left_nccl(r: dict[str, Any]) -> bool:
    """A train row whose recurring tasks all ran NCCL's choice through the steady window and never tried
    another configuration (trace.fell_back_to_nccl's counts)."""
    n = r.get("recurring_tasks")
    share = r.get("second_half_nccl_share")
    if not n or r.get("tasks_tried") != 0 or r.get("tasks_at_nccl") != n:
        return False
    return isinstance(share, (int, float)) and finite_number(share) and share >= T.FELL_BACK_SHARE


def train_markdown(doc: dict[str, Any]) -> str:
    s = doc.get("settings", {})
    lines = [
        f"# autoccl bench train ({s.get('preset')}, {s.get('world_size')} ranks, {s.get('device')})",
        "",
    ]
    caveat = gloo_caveat(doc)
    if caveat:
        lines += [caveat, ""]
    if doc.get("status") in ("partial", "interrupted"):
        lines += [f"**{doc['status']} run: only the launches that finished are in this table.**", ""]
    lines += [
        "| parallel | mode | params | steady ms/iter | tokens/s | first 10 ms/iter | search cost s | "
        "gain ms/iter | break-even iters | search ended at iter | tuned ms/iter (plain, same iters) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    notes = []
    untuned = False
    for r in doc.get("train", []):
        # a resilience comparison runs each mode several times (sync/resilient, clean/injected): name which
        mode = (
            r["launch"].split("/", 1)[1] if "mean_step_ms" in r and "/" in r.get("launch", "") else r["mode"]
        )
        tuned = (
            f"{_f(r['tuned_ms'], '.2f')} ({_f(r.get('plain_same_iters_ms'), '.2f')})"
            if r.get("tuned_ms") is not None
            else "–"
        )
        if caveat and any(r.get(k) is not None for k in _TUNING_KEYS):
            # gloo loads no plugin: nothing was tuned, the difference of two gloo runs is no cost nor gain
            trade = "withheld | withheld | withheld"
            untuned = True
        elif r.get("fell_back_to_nccl") is True and r.get("gain_ms") is not None:
            # the steady window ran NCCL's own configurations: the "gain" is two launches' movement
            trade = f"{_f(r.get('search_cost_s'), '.3f')} | withheld | withheld"
            notes.append(
                f"**{r['parallel']} {mode} ran NCCL's choice{_second_half(r)}** (it tried others and every "
                "recurring task ended there: a fall-back): its steady step is "
                f"{_apart(r['gain_ms'])}, what two launches of the same configurations move, not a gain or "
                "loss of the tuner's; gain and break-even are withheld (the JSON keeps them). `autoccl bench "
                "train-pairs` counts such a launch as 1.00×."
            )
        elif _never_left_nccl(r) and r.get("gain_ms") is not None:
            # nothing but NCCL's own configurations, no other tried (a table of NCCL's choices, searches that
            # kept NCCL's choice from their first calls): the plugin's presence and two launches' movement
            trade = f"{_f(r.get('search_cost_s'), '.3f')} | withheld | withheld"
            notes.append(
                f"**{r['parallel']} {mode} ran NCCL's choice{_second_half(r)}** and tried no other (its "
                "table, or its searches from their first calls, held NCCL's choice): its steady step is "
                f"{_apart(r['gain_ms'])}, what two launches move with the plugin loaded, not a gain or loss "
                "of its decisions; gain and break-even are withheld (the JSON keeps them). `autoccl bench "
                "train-pairs` keeps its measured ratio (the plugin's presence)."
            )
        else:
            trade = (
                f"{_f(r.get('search_cost_s'), '.3f')} | {_f(r.get('gain_ms'), '.2f')} | "
                f"{_f(r.get('break_even_iters'), '.0f')}"
            )
        lines.append(
            f"| {r['parallel']} | {mode} | {_params(r.get('params'))} | {_f(r.get('steady_ms'), '.2f')} | "
            f"{_f(r.get('tokens_per_s'), '.0f')} | {_f(r.get('first10_ms'), '.2f')} | {trade} | "
            f"{_f(r.get('search_end_iter'), '.0f')} | {tuned} |"
        )
        if r.get("search_in_steady_window"):
            n = (doc.get("settings") or {}).get("iters") or "?"
            notes.append(
                f"**{r['parallel']} {mode}: the search changed decisions until iteration "
                f"{r['search_end_iter']} of {n}, inside the steady window (the second half): the steady "
                "column measures the search, not its result. Run more iterations (-n) for the tuned step.**"
            )
    if not untuned and any(finite_number(r.get("search_cost_s")) for r in doc.get("train", [])):
        notes.insert(
            0,
            "Search cost: the online launch's time minus plain NCCL's over the same iterations before its "
            "search ended (the first half where the launch left no trace), so it holds the two launches' own "
            "difference as well; break-even = search cost / gain.",
        )
    if untuned:
        notes.insert(
            0,
            "Tuning cost, gain and break-even are withheld here: gloo loads no plugin, so nothing was "
            "tuned and the difference between two gloo launches is noise, not a tuner's cost or gain (the "
            "JSON keeps the computed values).",
        )
    for note in notes:  # paragraphs of their own
        lines += ["", note]
    lines += resilience_markdown(doc)
    lines += exposure_truth_markdown(doc)
    fails = doc.get("failures") or []
    if fails:
        lines += ["", "## failed launches", ""]
        lines += [f"- `{f['launch']}`: {error_summary(f['error'])}" for f in fails]
    return "\n".join(lines) + "\n"


def exposure_truth_markdown(doc: dict[str, Any]) -> list[str]:
    """The launches profiled with --torch-profile: the truth's verdicts per position, and where the plugin
    estimated exposure too, how many of its verdicts the truth confirms (exposure-truth.md has the table)."""
    launches = [e for e in doc.get("launches", []) if e.get("exposure_truth")]
    if not launches:
        return []
    lines = [
        "",
        "## exposure ground truth (--torch-profile)",
        "",
        "| launch | profiled steps | NCCL calls a step | exposed / hidden (truth) | estimate against it |",
        "|---|---|---|---|---|",
    ]
    for e in launches:
        t = e["exposure_truth"]
        if t.get("reason"):
            lines.append(f"| {e['label']} | – | – | – | no truth: {t['reason']} |")
            continue
        pos = t.get("positions", [])
        exposed = sum(p.get("verdict") == "exposed" for p in pos)
        compared = "no exposure record in the launch's trace"
        if e.get("exposure_compare"):
            parts = []
            for c in e["exposure_compare"]:
                n = c["counts"]
                part = verdict_counts_text(n)
                if c.get("tasks"):  # the per-task regression's verdicts (an older plugin's record has none)
                    part += f"; tasks {verdict_counts_text(c.get('task_counts', {}))} of {len(c['tasks'])}"
                parts.append(part)
            compared = "; ".join(parts) + f" (`{e.get('exposure_truth_md')}`)"
        lines.append(
            f"| {e['label']} | {len(t.get('iterations', []))} | {len(pos)} | "
            f"{exposed} / {len(pos) - exposed} | {compared} |"
        )
    window = next((e["exposure_truth"].get("profiled_iters") for e in launches), None)
    if window:
        lines += [
            "",
            f"Iterations {window[0]}–{window[1] - 1} of each launch ran under the profiler ({window[0]} its "
            "warm-up) and are slower: they are in the iteration times, not in the steady numbers (steady "
            "ms/iter, tokens/s, gain).",
        ]
    return lines


def resilience_markdown(doc: dict[str, Any]) -> list[str]:
    """The straggler / lost-rank comparison: mean step time (after the warm-up steps; the median of the
    table above hides delays on a fifth of the steps) and loss, each against the synchronous launch of
    the same parallelism and mode without injected faults."""
    rows = [r for r in doc.get("train", []) if "mean_step_ms" in r]
    if not rows:
        return []
    s = doc.get("settings", {})
    inj = ", ".join(f"--{k} {s[k]}" for k in ("straggler", "kill") if s.get(k)) or "none"
    lines = [
        "",
        "## resilience",
        "",
        f"Injected: {inj} (delay: {s.get('delay', 'busy')}); data: {s.get('data', 'random')}. "
        "Ratios are against the synchronous launch without injection (clean sync).",
        "",
        "| launch | mean ms/step | vs clean sync | eval loss | vs clean sync | partial steps | "
        "max staleness | lost ranks | same weights |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def base(r: dict[str, Any]) -> dict[str, Any] | None:
        for b in rows:
            if (
                b["parallel"] == r["parallel"]
                and b["mode"] == r["mode"]
                and not b.get("resilient")
                and not b.get("injected")
            ):
                return b
        return None

    for r in rows:
        b = base(r)
        mine, theirs = r.get("mean_step_ms"), b.get("mean_step_ms") if b else None
        st = mine / theirs if finite_number(mine) and finite_number(theirs) and theirs else math.nan
        ev, bev = r.get("eval_loss"), b.get("eval_loss") if b else None
        lr = ev / bev if finite_number(ev) and finite_number(bev) and bev else math.nan
        res = r.get("resilience") or {}
        lost = [str(x) for rec in res.get("recoveries", []) for x in rec.get("lost", [])]
        lost += [f"{x} back at step {j['round']}" for j in res.get("joins", []) for x in j.get("joined", [])]
        lines.append(
            f"| {r['launch']} | {_f(r.get('mean_step_ms'), '.1f')} | {_f(st, '.3f')} | {_f(ev, '.4f')} | "
            f"{_f(lr, '.4f')} | {res.get('partial_rounds', '–')} | {res.get('max_staleness', '–')} | "
            f"{', '.join(lost) or '–'} | {'yes' if r.get('weights_identical') else 'NO'} |"
        )
    return lines


def _params(n: Any) -> str:
    if not isinstance(n, int):
        return "–"
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M" if n >= 1e7 else f"{n / 1e6:.2f}M"


def _bw(v: float) -> str:
    """GB/s with one decimal, or three significant digits for small (CPU) values."""
    return f"{v:.1f}" if abs(v) >= 10 else f"{v:.3g}"


def _f(v: Any, fmt: str) -> str:
    return format(v, fmt) if finite_number(v) else "–"


def write_outputs(doc: dict[str, Any], prefix: Path) -> list[Path]:
    """PREFIX.json (everything), PREFIX.csv (coll rows incl. sweeps / train iterations), PREFIX.md."""
    prefix.parent.mkdir(parents=True, exist_ok=True)
    paths = [prefix.with_name(prefix.name + ext) for ext in (".json", ".csv", ".md")]
    write_json(doc, paths[0])
    if doc["kind"] == "coll":
        rows = list(doc.get("rows", [])) + oracle_best(doc.get("rows", []))
        paths[1].write_text(csv_text(rows))
        paths[2].write_text(coll_markdown(doc))
    else:
        paths[1].write_text(train_csv(doc))
        paths[2].write_text(train_markdown(doc))
    return paths


def train_csv(doc: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    its = doc.get("iterations", [])
    with_loss = any("loss" in it for it in its)
    w.writerow(["parallel", "mode", "launch", "iter", "iter_ms", *(["loss"] if with_loss else [])])
    for it in its:
        losses = it.get("loss") or []
        for i, t in enumerate(it["iter_ms"]):
            loss = losses[i] if i < len(losses) else None
            extra = [f"{loss:.6g}" if loss is not None else ""] if with_loss else []
            w.writerow([it["parallel"], it["mode"], it["launch"], i, f"{t:.6g}", *extra])
    return buf.getvalue()
