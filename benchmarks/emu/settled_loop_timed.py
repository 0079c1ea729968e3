"""How many calls of nccl-tests' 1 and 2 MiB loops run timed behind the larger sizes' warm-up samples, one
process per rank over the TCP coordinator, idle and beside busy loops (the scenario of
tests/emu/test_online.py::test_settled_sizes_run_untimed_in_an_nccl_tests_loop). The authority lets go of
timing once the other rank's reports of the held samples arrive: a time, not a call count, so the count grows
with the machine's load.

AUTOCCL_LIB_DIR=build/dev/lib PYTHONPATH=python:tests/emu python3 benchmarks/emu/settled_loop_timed.py \
    --runs 6 --busy 0 --busy 6 > benchmarks/results/cpu/settled-loop-timing/timed_calls.md
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from test_online import online_env

from autoccl.emu import Call, Comm, Group, Scenario, run

SIZES = [1 << 20, 2 << 20, 64 << 20, 256 << 20]


def scenario() -> Scenario:
    comm = Comm("c", 0x7E57, (0, 1))
    groups = [Group("c", (Call("allreduce", n),), repeat=20) for n in SIZES]
    groups += [Group("c", (Call("allreduce", n),), repeat=84) for n in SIZES]
    return Scenario([comm], groups, runahead=4, lead=8)


def timed_in_loop(res: object, rank: int, nbytes: int) -> int:
    calls = [x for x in res.trace if x.get("ev") == "call" and x["rank"] == rank]  # type: ignore[attr-defined]
    loop = [x for x in calls if int(x["bytes"]) == nbytes][20:]
    return sum(int(x["timing"]) for x in loop)


def one_run(tmp: Path) -> dict[str, tuple[int, ...]]:
    env = online_env(True, AUTOCCL_CACHE_DIR=str(tmp / "cache"))
    out: dict[str, tuple[int, ...]] = {}
    for start in ("cold", "table"):  # the second run starts from the table the first one wrote
        res = run(scenario(), plugin="default", env=env, processes=True, timeout=300, workdir=tmp / start)
        out[start] = tuple(timed_in_loop(res, rank, n) for n in SIZES[:2] for rank in (0, 1))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument(
        "--busy", type=int, action="append", default=None, help="busy-loop processes beside (repeatable)"
    )
    args = ap.parse_args()
    columns = ("cold 1 MiB", "cold 2 MiB", "table 1 MiB", "table 2 MiB")
    print("| busy loops | run | " + " | ".join(f"{c}: rank 0 / 1" for c in columns) + " |")
    print("| ---: | ---: | --- | --- | --- | --- |")
    for busy in args.busy or [0]:
        loops = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
        try:
            for r in range(args.runs):
                with tempfile.TemporaryDirectory() as d:
                    got = one_run(Path(d))
                cold, table = got["cold"], got["table"]
                cells = [f"{a} / {b}" for a, b in (cold[:2], cold[2:], table[:2], table[2:])]
                print(f"| {busy} | {r + 1} | " + " | ".join(cells) + " |", flush=True)
        finally:
            for p in loops:
                p.kill()
                p.wait()
    print(
        f"\nTimed calls among the 84 of the 1 MiB loop (the first after the warm-ups) and of the 2 MiB loop "
        f"({len(SIZES)} sizes, 20 warm-up calls each first)."
    )


if __name__ == "__main__":
    main()
