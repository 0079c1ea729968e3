"""Repeats the two-host runs of tests/emu/test_multihost.py (torchrun's multi-node arguments, Slurm's
variables; `autoccl run` on each host) and counts divergent decisions and failed hosts per run.

    AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python python benchmarks/emu/multihost_runs.py --runs 10
    # another checkout's CLI and library (e.g. the code before the launcher-derived coordinator):
    AUTOCCL_LIB_DIR=/tmp/old/build/lib python benchmarks/emu/multihost_runs.py --python /tmp/old/python
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "emu"))

import test_multihost as mh

from autoccl._paths import emulator_path, plugin_path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--python", type=Path, default=None, help="the python/ folder of the CLI each host runs")
    args = ap.parse_args()
    if args.python:
        mh.PYTHON_DIR = args.python.resolve()
    emulator, plugin = emulator_path(), plugin_path()
    print("launcher | run | host exit codes | calls | divergent calls | world calls tuned on host B")
    for launcher, make in (("torchrun", mh._torchrun_hosts), ("slurm", mh._slurm_hosts)):
        for run in range(args.runs):
            with tempfile.TemporaryDirectory(prefix="autoccl-multihost-") as tmp:
                work = mh._prepare(Path(tmp))
                codes = mh._run_hosts(work, make(work, emulator, plugin), timeout=240)
                calls = mh._calls(work)
                divergent = mh.find_divergences(calls)
                world_b = [
                    c
                    for c in calls
                    if c["hash"] == f"{mh.WORLD_HASH:016x}"
                    and c["grank"] in mh.RANKS[mh.HOST_B]
                    and (c["algo"], c["proto"], c["channels"])
                    != (c["def_algo"], c["def_proto"], c["def_channels"])
                ]
                row = [launcher, run, sorted(codes.values()), len(calls), len(divergent), len(world_b)]
                print(" | ".join(str(x) for x in row))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
