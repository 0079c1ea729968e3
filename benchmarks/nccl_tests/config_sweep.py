"""Every configuration the tuner can force, checked by nccl-tests' own data check: a summary of `bench
nccl-tests` runs whose modes force one (algorithm, protocol[, channels]) each in fixed mode, under
`-c 1 -d all -o all`.

The tuner only ever chooses among configurations NCCL accepts, so a wrong result under one of them is NCCL's,
but the tuner is what would run it in a user's job. Per mode and collective this says whether every row of
nccl-tests' check (every size, dtype and reduction, out of place and in place) was exact, and, from the
traces, whether NCCL ran what was forced: each timed call's `call` record (what the plugin applied, or
`refused` where NCCL's cost table marked the pair unsupported and NCCL's choice stood) is matched with its
`time` record (what NCCL's profiler says the kernel ran). Also the ranks' agreement (divergent calls).

    python3 benchmarks/nccl_tests/config_sweep.py OUT [OUT ...] [--json sweep.json] > sweep.md

OUT: `autoccl bench nccl-tests ... --trace -o OUT` folders (launches.jsonl, logs/, traces/).
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from autoccl.bench import nccl_tests as NT
from autoccl.bench.trace import read_records, trace_files

_OUT_OF_BOUNDS = re.compile(r"#\s*Out of bounds values\s*:\s*(\d+)\s+(\w+)")
_CALL_KEY = ("comm", "rank", "coll", "bytes", "pipe", "call")


def _lower(x: Any) -> Any:
    return x.lower() if isinstance(x, str) else x


def forced_against_ran(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Each timed call's applied configuration (its `call` record) against what NCCL ran (its `time`
    record)."""
    calls = {tuple(r.get(k) for k in _CALL_KEY): r for r in records if r.get("ev") == "call"}
    ran: Counter[str] = Counter()
    as_forced = fewer_channels = other = refused_timed = left_to_nccl = 0
    mismatches: list[str] = []
    for t in records:
        if t.get("ev") != "time":
            continue
        got = (_lower(t.get("nccl_algo")), _lower(t.get("nccl_proto")), t.get("nccl_channels"))
        ran["/".join(str(x) for x in got)] += 1
        c = calls.get(tuple(t.get(k) for k in _CALL_KEY))
        if c is None:
            continue
        if c.get("refused"):
            refused_timed += 1
            continue
        if c.get("algo") is None:
            left_to_nccl += 1
            continue
        want = (c.get("algo"), c.get("proto"), c.get("channels") or got[2])
        if want == got:
            as_forced += 1
        elif want[:2] == got[:2] and isinstance(got[2], int) and got[2] < want[2]:
            fewer_channels += 1  # NCCL's rule for the size or the transport: fewer channels than asked
        else:
            other += 1
            if len(mismatches) < 3:
                where = f"{c.get('coll')} {c.get('bytes')} B call {c.get('call')}"
                mismatches.append(f"{where}: {want} ran {got}")
    call_recs = [r for r in records if r.get("ev") == "call"]
    return {
        "calls": len(call_recs),
        "refused": sum(1 for r in call_recs if r.get("refused")),
        "timed": sum(ran.values()),
        "timed_as_forced": as_forced,
        "timed_fewer_channels": fewer_channels,
        "timed_otherwise": other,
        "timed_refused": refused_timed,
        "timed_left_to_nccl": left_to_nccl,
        "ran": dict(ran.most_common()),
        "mismatch_examples": mismatches,
    }


def launch_summary(out: Path, rec: dict[str, Any]) -> dict[str, Any]:
    rows = rec.get("rows") or []
    log = out / rec["log"] if rec.get("log") else None
    text = log.read_text(errors="replace") if log and log.is_file() else ""
    bounds = [(int(m.group(1)), m.group(2)) for m in _OUT_OF_BOUNDS.finditer(text)]
    row = {
        "mode": rec["mode"],
        "coll": rec["coll"],
        "rc": rec.get("rc"),
        "error": rec.get("error"),
        "rows": len(rows),
        "sizes": len({r["bytes"] for r in rows}),
        "dtypes": sorted({r["dtype"] for r in rows}),
        "data_errors": rec.get("data_errors", 0),
        "out_of_bounds": sum(n for n, _ in bounds) if bounds else None,
        "no_tuner": rec.get("no_tuner") or [],
    }
    prefix = out / "traces" / rec["mode"] / f"p{rec['pass']}_{rec['coll']}_{rec['launch']}"
    records = read_records(trace_files(str(prefix)))
    if records:
        row.update(forced_against_ran(records))
        row.update(NT.cross_rank_agreement(records))
    return row


def summarise(outs: list[Path]) -> list[dict[str, Any]]:
    rows = []
    for out in outs:
        path = out / "launches.jsonl"
        if not path.is_file():
            raise SystemExit(f"{path}: no such file (an `autoccl bench nccl-tests -o {out}` folder?)")
        for line in path.read_text().splitlines():
            if line.strip():
                rows.append(launch_summary(out, json.loads(line)))
    return rows


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| mode | collective | exit | rows checked (sizes × dtypes × ops) | dtypes | wrong | out of bounds "
        "| calls | refused | timed: as forced / fewer channels / otherwise / NCCL's choice "
        "| what NCCL ran (timed calls) | divergent |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: |",
    ]
    for r in rows:
        ran = ", ".join(f"{k} ×{v}" for k, v in list(r.get("ran", {}).items())[:4])
        timed = "no trace"
        if "timed" in r:
            nccls = r["timed_refused"] + r["timed_left_to_nccl"]
            timed = f"{r['timed_as_forced']} / {r['timed_fewer_channels']} / {r['timed_otherwise']} / {nccls}"
        lines.append(
            f"| {r['mode']} | {r['coll']} | {r['rc']} | {r['rows']} ({r['sizes']} sizes) "
            f"| {len(r['dtypes'])} | "
            f"{r['data_errors']} | {r['out_of_bounds'] if r['out_of_bounds'] is not None else '—'} | "
            f"{r.get('calls', '—')} | {r.get('refused', '—')} | {timed} | {ran or '—'} | "
            f"{r.get('divergent_calls', '—')} |"
        )
    bad = [r for r in rows if r["rc"] != 0 or r["data_errors"] or (r["out_of_bounds"] or 0) > 0]
    wrongly_run = [r for r in rows if r.get("timed_otherwise")]
    divergent = sum(int(r.get("divergent_calls") or 0) for r in rows)
    fewer = sum(int(r.get("timed_fewer_channels") or 0) for r in rows)
    lines += [
        "",
        f"Launches: {len(rows)}; failed or with wrong values: {len(bad)}; "
        f"rows checked: {sum(r['rows'] for r in rows)}; wrong values: {sum(r['data_errors'] for r in rows)}; "
        f"timed calls NCCL ran on fewer channels than applied: {fewer}; launches where NCCL ran another "
        f"algorithm or protocol than applied on a timed call: {len(wrongly_run)}; "
        f"divergent calls: {divergent}.",
    ]
    for r in bad:
        why = r.get("error") or ""
        lines.append(f"- {r['mode']} {r['coll']}: exit {r['rc']}, {r['data_errors']} wrong: {why}")
    for r in wrongly_run:
        lines.append(f"- {r['mode']} {r['coll']}: {'; '.join(r['mismatch_examples'])}")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("outs", nargs="+", type=Path, help="bench nccl-tests output folders")
    ap.add_argument("--json", type=Path, help="also write the per-launch rows here")
    a = ap.parse_args()
    rows = summarise(a.outs)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1) + "\n")
    print(markdown(rows), end="")


if __name__ == "__main__":
    main()
