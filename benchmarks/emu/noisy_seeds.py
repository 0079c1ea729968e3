"""How often online mode pins a configuration slower than NCCL's choice in the emulator's noisy scenario
(tests/emu/test_online.py::test_online_noisy_never_worse: 3 % log-normal noise and outliers, 400 calls per
task), over scenario seeds, several emulator runs at a time (the load under which CI once failed it).

AUTOCCL_LIB_DIR=build/rel/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/noisy_seeds.py \
    --seeds 0:600 --workers 3 > benchmarks/results/cpu/noisy-scenario/noisy_seeds.md

A row per task that ended more than 1 % slower than NCCL's choice (the test's bound) or more than 5 % from
the model's best, then the counts.
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from test_online import PerfModel, bounded, default_model, model_best, online_env, run, scenario


def one(plugin: Path, model: PerfModel, seed: int) -> list[str]:
    res = run(bounded(scenario(400, seed=seed)), plugin=plugin, env=online_env(False), timeout=300)
    final: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in res.calls:
        key = (r["hash"], r["coll"], int(r["task_bytes"]))
        if key not in final or int(r["call"]) > int(final[key]["call"]):
            final[key] = r
    bad = []
    for (_comm, coll, nbytes), r in sorted(final.items()):
        args = (r["coll"], r["nranks"], r["task_bytes"])
        mine = model.mean_us(*args, r["algo"], r["proto"], r["used_channels"], r["chunk"], 0.0)
        nccl = model.mean_us(*args, r["def_algo"], r["def_proto"], r["def_channels"], r["def_chunk"], 0.0)
        best = model_best(model, r["coll"], r["nranks"], r["task_bytes"], r["comm_channels"])
        if mine > nccl * 1.01 or mine > best * 1.05:
            pinned = f"{r['algo']}/{r['proto']}/{r['used_channels']} chunk {r['chunk']}"
            nccls = f"{r['def_algo']}/{r['def_proto']}/{r['def_channels']}"
            ratios = f"{mine / nccl:.3f} | {mine / best:.3f}"
            bad.append(f"| {seed} | {coll} {nbytes} | {pinned} | {nccls} | {ratios} |")
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", default="0:600", help="first:end of the scenario seeds")
    ap.add_argument("--workers", type=int, default=6, help="emulator runs at a time")
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.seeds.split(":"))
    plugin = Path(os.environ["AUTOCCL_LIB_DIR"]) / "libautoccl-nccl.so"
    path = default_model()
    model = PerfModel.load_file(path) if path else PerfModel()
    with ThreadPoolExecutor(args.workers) as pool:
        rows = [row for bad in pool.map(lambda s: one(plugin, model, s), range(lo, hi)) for row in bad]
    print("| seed | task | pinned | NCCL's choice | x NCCL | x best |")
    print("| ---: | --- | --- | --- | ---: | ---: |")
    for row in rows:
        print(row)
    slower = sum(1 for row in rows if float(row.split("|")[5]) > 1.01)
    print(
        f"\n{hi - lo} runs ({args.workers} at a time): {slower} tasks pinned > 1 % slower than NCCL's "
        f"choice, {len(rows)} rows in all"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
