"""Is the first call after a switch of configuration slow? From `bench nccl-tests --trace` traces of online
launches (rank 0's trace: the communicator's authority, whose calls are timed while a task searches).

For each task, every timed call k whose call k - 1 ran another configuration ("after a switch") is compared
with the calls of the same configuration whose call before ran that configuration too ("steady"): its kernel
time over the median of those steady calls, where the configuration has at least --min-steady of them. The
search gives up a candidate whose first sample is 30 % slower than the incumbent (`abandonAbove`): where calls
after a switch ran that much slower on their own, good candidates would be given up (the emulator's
`switch_factor` models such a machine: tests/emu/test_hostile_machines.py).

    python3 benchmarks/nccl_tests/switch_cost.py <bench out>/traces/online-p3 --pass 0
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from cold_pass_cost import task_calls  # this folder's: rank 0's calls per task, each its config and time

Config = tuple[str, str, int] | None  # (algo, proto, channels) applied; None: NCCL's choice


def switch_ratios(calls: dict[int, dict[str, Any]], min_steady: int) -> list[float]:
    """Each timed call right after a switch over its configuration's steady median."""
    steady: dict[Config, list[float]] = defaultdict(list)
    switched: list[tuple[Config, float]] = []
    for k, c in calls.items():
        prev = calls.get(k - 1)
        if "gpu_us" not in c or "cfg" not in c or prev is None or "cfg" not in prev:
            continue
        if prev["cfg"] == c["cfg"]:
            steady[c["cfg"]].append(c["gpu_us"])
        else:
            switched.append((c["cfg"], c["gpu_us"]))
    return [us / statistics.median(steady[cfg]) for cfg, us in switched if len(steady[cfg]) >= min_steady]


def summary(ratios: list[float], above: float) -> dict[str, Any]:
    q = statistics.quantiles(ratios, n=10) if len(ratios) >= 2 else [ratios[0]] * 9
    return {
        "n": len(ratios),
        "median": statistics.median(ratios),
        "p10": q[0],
        "p90": q[8],
        "above": sum(1 for r in ratios if r > above),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("traces", type=Path, help="a folder of traces (bench nccl-tests --trace: traces/<mode>/)")
    ap.add_argument("--pass", dest="pass_no", type=int, default=0, help="the pass whose traces to read")
    ap.add_argument("--min-steady", type=int, default=2, help="steady calls a configuration needs [2]")
    ap.add_argument("--above", type=float, default=1.3, help="count ratios above this [1.3: abandonAbove]")
    ap.add_argument("--json", type=Path, help="also write the rows here")
    a = ap.parse_args()
    files = sorted(a.traces.glob(f"p{a.pass_no}_*.jsonl"))
    if not files:
        raise SystemExit(f"no traces of pass {a.pass_no} in {a.traces} (p{a.pass_no}_*.jsonl)")
    rows, every = [], []
    for path in files:
        for (coll, b), calls in sorted(task_calls(path).items()):
            r = switch_ratios(calls, a.min_steady)
            if r:
                every += r
                name = path.name.split(".vm")[0]
                rows.append({"file": name, "coll": coll, "bytes": b, **summary(r, a.above)})
    print(f"| trace | collective | size | calls after a switch | median ratio | p10–p90 | above {a.above}x |")
    print("| --- | --- | ---: | ---: | ---: | --- | ---: |")
    for r in rows:
        size = f"{r['bytes'] / (1 << 20):g} MiB"
        print(
            f"| {r['file']} | {r['coll']} | {size} | {r['n']} | {r['median']:.3f} | "
            f"{r['p10']:.3f}–{r['p90']:.3f} | {r['above']} |"
        )
    if every:
        s = summary(every, a.above)
        print(
            f"\nall {s['n']} calls after a switch: median {s['median']:.3f}x their configuration's steady "
            f"median (p10 {s['p10']:.3f}, p90 {s['p90']:.3f}); {s['above']} above {a.above}x"
        )
    else:
        print("\nno timed call after a switch whose configuration had steady calls")
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
