"""All-Reduce on about 40,000 NPUs: wall time and peak memory of `autoccl synth`, without a schedule and with
the schedule streamed to disk.

    python benchmarks/synth/scale.py --stream-dir /some/disk \
        --out-dir benchmarks/results/cpu/synthesis/scale_40k

Runs the command line as a user would (defaults: chunks and seeds chosen; 2 threads), each under
`/usr/bin/time -v`, on a 200x200 mesh (40,000 NPUs) and a 34x34x34 torus (39,304 NPUs), links of 50 GiB/s and
0.5 us, 1 GiB. The stream (several GB) is deleted after its size is recorded unless --keep-streams. The load
average before and after each run is recorded, and every run is kept in results.json: the machine may be
shared, and then the times are pessimistic.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

CASES = [
    ("mesh_200x200", ["-g", "mesh:200x200"]),
    ("torus_34x34x34", ["-g", "torus:34x34x34"]),
]
COMMON = ["--bw", "53.6870912", "--lat", "0.5", "-c", "allreduce", "-s", "1G", "--threads", "2"]


def _run(args: list[str], report: Path) -> dict[str, Any]:
    cmd = ["/usr/bin/time", "-v", sys.executable, "-m", "autoccl.cli", "synth", *args]
    cmd += ["--report", str(report)]
    load0 = os.getloadavg()
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{p.stdout}\n{p.stderr}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))  # type: ignore[union-attr]
    cpu = re.search(r"Percent of CPU this job got: (\d+)%", p.stderr)
    rep = json.loads(report.read_text())
    return {
        "command": "autoccl synth " + " ".join(args),
        "wall_s": wall,
        "peak_rss_mib": rss / 1024,
        "cpu_percent": int(cpu.group(1)) if cpu else None,
        "loadavg_before": load0,
        "loadavg_after": os.getloadavg(),
        "stdout": p.stdout.strip().splitlines(),
        "report": {k: v for k, v in rep.items() if k != "seed_times_us"},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stream-dir", type=Path, required=True, help="where the streamed schedules go (GBs)")
    ap.add_argument("--out-dir", type=Path, required=True)
    ap.add_argument("--keep-streams", action="store_true")
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    a.out_dir.mkdir(parents=True, exist_ok=True)
    a.stream_dir.mkdir(parents=True, exist_ok=True)
    results: list[dict[str, Any]] = []
    out = a.out_dir / "results.json"
    if out.exists():
        results = json.loads(out.read_text())["runs"]
    for name, gen in CASES:
        if a.only and name not in a.only:
            continue
        for mode in ("no-schedule", "stream"):
            stream = a.stream_dir / f"{name}.acss"
            extra = ["--no-schedule"] if mode == "no-schedule" else ["--stream", str(stream)]
            print(f"== {name} {mode}", flush=True)
            r = _run([*gen, *COMMON, *extra], a.out_dir / f".{name}.{mode}.report.json")
            r.update(topology=name, mode=mode)
            if mode == "stream":
                r["stream_bytes"] = stream.stat().st_size
                if not a.keep_streams:
                    stream.unlink()
            (a.out_dir / f".{name}.{mode}.report.json").unlink()
            print(json.dumps({k: v for k, v in r.items() if k != "report"}, indent=1), flush=True)
            r["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
            r["commit"] = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            ).stdout.strip()
            results.append(r)  # every run is kept: on a shared machine they differ
            meta = {
                "python": platform.python_version(),
                "machine": platform.machine(),
                "cpu": platform.processor(),
                "cores": os.cpu_count(),
                "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
            }
            out.write_text(json.dumps({"meta": meta, "runs": results}, indent=1) + "\n")


if __name__ == "__main__":
    main()
