"""Emulator throughput: collectives per second of `autoccl-emu` with the plugin in a given mode.

AUTOCCL_LIB_DIR=build/dev-emu/lib PYTHONPATH=python python3 benchmarks/emu/throughput.py --mode observe
"""

from __future__ import annotations

import argparse
import json
import time

from autoccl.emu import run, simple


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="observe")
    ap.add_argument("--repeat", type=int, default=2000)
    ap.add_argument("--comms", type=int, default=2)
    ap.add_argument("--processes", action="store_true")
    args = ap.parse_args()
    sc = simple(ncomms=args.comms, repeat=args.repeat, runahead=4, reorder=8)
    plugin = None if args.mode == "none" else "default"
    t0 = time.perf_counter()
    res = run(sc, plugin=plugin, env={"AUTOCCL_MODE": args.mode}, processes=args.processes, trace=False)
    wall = time.perf_counter() - t0
    calls = len(res.calls)
    out = {"mode": args.mode, "calls": calls, "wall_s": round(wall, 3), "calls_per_s": round(calls / wall)}
    out["returncode"] = res.returncode
    print(json.dumps(out))
    return 0 if res.returncode == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
