"""Cost of the default chunk choice on the point-to-point engine: synthesis time of `autoccl synth` (chunks
and seeds chosen) on homogeneous topologies, for one or more builds of the library, runs interleaved.

    python benchmarks/synth/chunk_trial_cost.py --lib before=/old/build/lib --lib after=build/rel/lib \
        --fixed before --runs 7 --out results.json --md table.md

Each run is the command line as a user gives it (1 GiB All-Gather, default links of 50 GB/s and 0.5 us,
default seeds, all cores) in a fresh process with AUTOCCL_SYNTH_LIB_DIR set to the build's lib folder; the
time is the report's `synthesis_s` (the library call: chunk trials and the final synthesis). Each round goes
over every case and every build before the next, so a change of the machine's load falls on all of them
alike. The table gives medians; results.json keeps every run, the chunk count chosen, the schedule's time
and the trials. --fixed NAME adds runs of build NAME with `--chunks 1` (no trial: what the point-to-point
engine did before it tried counts).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

CASES = [
    ("ring:4", ["-g", "ring:4"]),
    ("ring:8", ["-g", "ring:8"]),
    ("torus:4x4", ["-g", "torus:4x4"]),
    ("hypercube:3", ["-g", "hypercube:3"]),
    ("mesh:8x8", ["-g", "mesh:8x8"]),
    ("hypercube:6", ["-g", "hypercube:6"]),
    ("torus:8x8x8", ["-g", "torus:8x8x8"]),
]
COMMON = ["-c", "allgather", "-s", "1G"]


def _run(lib: str, args: list[str], work: Path) -> dict[str, Any]:
    """One `autoccl synth` of a case with the build in `lib`: its report's synthesis time and choice."""
    report = work / "r.json"
    env = dict(os.environ, AUTOCCL_SYNTH_LIB_DIR=lib, AUTOCCL_LIB_DIR=lib)
    cmd = [sys.executable, "-m", "autoccl.cli", "synth", *args, *COMMON, "--report", str(report)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env, cwd=work)
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    rep = json.loads(report.read_text())
    return {
        "synthesis_s": rep["synthesis_s"],
        "chunks_per_npu": rep["chunks_per_npu"],
        "time_us": rep["time_us"],
        "ratio_to_bound": rep["time_us"] / rep["lower_bound_us"],
        "chunk_trials": rep["chunk_trials"],
        "seeds": rep["seeds"],
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", action="append", required=True, metavar="NAME=DIR", help="a build's lib folder")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--fixed", metavar="NAME", help="also run build NAME with --chunks 1")
    ap.add_argument("--out")
    ap.add_argument("--md")
    a = ap.parse_args()
    libs = dict(x.split("=", 1) for x in a.lib)
    # (column, lib folder, extra arguments)
    cols: list[tuple[str, str, list[str]]] = [(n, d, []) for n, d in libs.items()]
    if a.fixed:
        cols.insert(0, (f"{a.fixed} --chunks 1", libs[a.fixed], ["--chunks", "1"]))
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {n: {c: [] for c, _ in CASES} for n, _, _ in cols}
    loads = [os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(a.runs):
            for case, args in CASES:
                for name, lib, extra in cols:
                    runs[name][case].append(_run(str(Path(lib).resolve()), args + extra, Path(tmp)))
            loads.append(os.getloadavg())
    head = " | ".join(f"{n}: synthesis s (median) | {n}: chunks, x bound" for n, _, _ in cols)
    rows = [f"| topology | {head} |", "|---" * (1 + 2 * len(cols)) + "|"]
    for case, _ in CASES:
        cells = [f"`{case}`"]
        for name, _, _ in cols:
            rs = runs[name][case]
            cells.append(f"{statistics.median(r['synthesis_s'] for r in rs):.4f}")
            cells.append(f"{rs[0]['chunks_per_npu']}, {rs[0]['ratio_to_bound']:.3f}x")
        rows.append("| " + " | ".join(cells) + " |")
    table = "\n".join(rows)
    print(table)
    print(f"load average (1 min) per round: {', '.join(f'{x[0]:.2f}' for x in loads)}")
    if a.md:
        Path(a.md).write_text(table + "\n")
    if a.out:
        out = {
            "command": "autoccl synth -g TOPOLOGY " + " ".join(COMMON) + " --report r.json",
            "machine": {"cpus": os.cpu_count(), "platform": platform.platform()},
            "load_average_per_round": loads,
            "libs": libs,
            "runs": runs,
        }
        Path(a.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
