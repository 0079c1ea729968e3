"""What the metrics files (AUTOCCL_METRICS_DIR) cost a job in the emulator, CPU only: a 1 MiB all_reduce on
4 ranks (threads of one process), mode online, CALLS calls, run RUNS times alternately with metrics off and on
(written every 0.1 s, a hundred times the default rate), no trace. Prints the emulator's wall time per run
and the medians. A host-side check only: the emulator's simulated kernels take no GPU time, so the ratio
bounds the plugin's host work, not a GPU job's slowdown.
    AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python python3 benchmarks/emu/metrics_overhead.py 7 20000
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

from autoccl.emu import run, simple


def once(calls: int, metrics: bool) -> float:
    with tempfile.TemporaryDirectory() as d:
        env = {"AUTOCCL_MODE": "online", "AUTOCCL_HW": "GPU Xx4", "AUTOCCL_CACHE_DIR": str(Path(d) / "cache")}
        if metrics:
            (Path(d) / "m").mkdir()
            env["AUTOCCL_METRICS_DIR"] = str(Path(d) / "m")
            env["AUTOCCL_METRICS_INTERVAL_S"] = "0.1"
        res = run(simple({"allreduce": [1 << 20]}, nranks=4, repeat=calls), env=env, trace=False, timeout=600)
        if res.returncode != 0 or not res.summaries:
            raise SystemExit(f"emulator run failed: {res.stderr[-500:]}")
        if metrics and not list((Path(d) / "m").glob("*.prom")):
            raise SystemExit("metrics on, but no metrics file was written")
        return float(res.summaries[0]["wall_s"])


def main(runs: int, calls: int) -> None:
    off: list[float] = []
    on: list[float] = []
    for i in range(runs):
        off.append(once(calls, False))
        on.append(once(calls, True))
        print(f"run {i + 1}: off {off[-1]:.3f} s, on {on[-1]:.3f} s", flush=True)
    m_off, m_on = statistics.median(off), statistics.median(on)
    ratio = m_on / m_off
    print(f"median off {m_off:.3f} s, on {m_on:.3f} s, on/off {ratio:.4f} ({runs} runs of {calls} calls)")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: metrics_overhead.py RUNS CALLS")
    main(int(sys.argv[1]), int(sys.argv[2]))
