"""`autoccl synth`'s default synthesis on shared-port switches (one NVSwitch host, a loopback port) against
the `direct` and `ring` baselines, simulated on the same topology.

    python benchmarks/synth/switch_vs_baselines.py --out results.json --md table.md

Each case is what `autoccl synth -g switch:N -c COLL -s SIZE` does (chunks chosen by trial, default seeds,
links of 50 GB/s and 0.5 us), the same with the seeds alone (`direct=False`: the direct pattern not a
candidate spreading schedule), and what `autoccl sim -b direct` and `-b ring` give at one chunk per NPU. The
ratios are a synthesis's time over the faster baseline's: above 1, the baseline would have done better.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import autoccl.synth as S

PORTS = [4, 6, 8, 10, 12, 14, 16, 20, 24, 32, 40, 48, 64, 72]
SIZES = ["1M", "64M", "1G"]
COLLECTIVES = ["allgather", "reducescatter", "allreduce"]
BASELINES = ["direct", "ring"]


def case(ports: int, coll: str, size: str) -> dict[str, Any]:
    t = S.generate("switch", [ports])
    seeds = S.default_seeds(t)
    t0 = time.perf_counter()
    _, st = S.synthesize(t, coll, size, chunks=0, seeds=seeds, threads=2, record=False)
    secs = time.perf_counter() - t0
    t0 = time.perf_counter()
    _, alone = S.synthesize(t, coll, size, chunks=0, seeds=seeds, threads=2, record=False, direct=False)
    alone_s = time.perf_counter() - t0
    base = {b: float(S.simulate(t, S.baseline(t, b, coll, size))["time_us"]) for b in BASELINES}
    best = min(base, key=lambda b: base[b])
    return {
        "ports": ports,
        "collective": coll,
        "size": size,
        "synth_us": float(st["time_us"]),
        "chunks_per_npu": int(st["chunks_per_rank"]),
        "direct_pattern": bool(st["direct_pattern"]),
        "chunk_trials": st["chunk_trials"],
        "synthesis_s": secs,
        "seeds_alone_us": float(alone["time_us"]),
        "seeds_alone_chunks": int(alone["chunks_per_rank"]),
        "seeds_alone_s": alone_s,
        "baselines_us": base,
        "best_baseline": best,
        "ratio": float(st["time_us"]) / base[best],
        "seeds_alone_ratio": float(alone["time_us"]) / base[best],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ports", type=int, nargs="*", default=PORTS)
    ap.add_argument("--out", type=Path, required=True, help="results JSON")
    ap.add_argument("--md", type=Path, required=True, help="markdown table")
    a = ap.parse_args()
    rows = []
    for ports in a.ports:
        for size in SIZES:
            for coll in COLLECTIVES:
                r = case(ports, coll, size)
                rows.append(r)
                b = r["best_baseline"]
                print(
                    f"switch:{ports} {coll} {size}: {r['synth_us']:.2f} us at {r['chunks_per_npu']} "
                    f"chunk(s), seeds alone {r['seeds_alone_us']:.2f} us, {b} {r['baselines_us'][b]:.2f} us, "
                    f"{r['ratio']:.3f}x / {r['seeds_alone_ratio']:.3f}x",
                    flush=True,
                )
    git = ["git", "describe", "--always", "--dirty"]
    meta = {
        "build": subprocess.run(git, capture_output=True, text=True).stdout.strip(),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    a.out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    lines = [
        "| switch ports | collective | size | synthesis (us) | chunks | direct pattern | seeds alone (us) "
        "| chunks | faster baseline (us) | synthesis / baseline | seeds alone / baseline |",
        "|---:|---|---|---:|---:|---|---:|---:|---|---:|---:|",
    ]
    for r in rows:
        b = r["best_baseline"]
        lines.append(
            f"| {r['ports']} | {r['collective']} | {r['size']} | {r['synth_us']:.2f} | "
            f"{r['chunks_per_npu']} | {'yes' if r['direct_pattern'] else 'no'} | {r['seeds_alone_us']:.2f} | "
            f"{r['seeds_alone_chunks']} | {b} {r['baselines_us'][b]:.2f} | {r['ratio']:.3f} | "
            f"{r['seeds_alone_ratio']:.3f} |"
        )
    a.md.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
