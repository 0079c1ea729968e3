"""Synthesis quality of two builds of autoccl._synth on the benchmark topologies (per-seed and best times).

Run once per build (pick the build with AUTOCCL_SYNTH_LIB_DIR and PYTHONPATH=python), then compare:

    export PYTHONPATH=python
    AUTOCCL_SYNTH_LIB_DIR=/tmp/old/lib python benchmarks/synth/quality_compare.py --out old.json
    AUTOCCL_SYNTH_LIB_DIR=/tmp/new/lib python benchmarks/synth/quality_compare.py --out new.json
    python benchmarks/synth/quality_compare.py --compare old.json new.json --md quality.md

Topologies: those of suite.py and tacos_compare.py (1 GiB; chunk = 2^30 / NPUs on the TACOS ones); All-Gather
and All-Reduce, 1 and 4 chunks per NPU (4 only off the homogeneous class, as in suite.py); seeds 1..k each
run on its own (seed_times_us), so both the best-of-k and every seed can be compared.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

GIB = 2**30 / 1e9


def cases(S: Any) -> list[tuple[str, str, Any, float]]:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import suite
    import tacos_compare

    out: list[tuple[str, str, Any, float]] = []
    for cls, name, t in suite.topologies():
        out.append((cls, name, t, float(2**30)))
    for name, _desc, spec in tacos_compare.TOPOLOGIES:
        t = tacos_compare._topology(spec)
        out.append(("tacos", name, t, float((2**30 // t.num_npus) * t.num_npus)))
    return out


def run(seeds: int, threads: int) -> list[dict[str, Any]]:
    from autoccl import synth as S

    rows: list[dict[str, Any]] = []
    for cls, name, t, size in cases(S):
        for coll in ("allgather", "allreduce"):
            for chunks in (1, 4):
                if chunks > 1 and cls in ("homogeneous", "tacos"):
                    continue
                if cls == "tacos" and coll != "allgather":
                    continue
                t0 = time.perf_counter()
                s, st = S.synthesize(t, coll, size, chunks=chunks, seeds=seeds, threads=threads, record=False)
                wall = time.perf_counter() - t0
                rows.append(
                    {
                        "class": cls,
                        "topology": name,
                        "npus": t.num_npus,
                        "collective": coll,
                        "chunks_per_npu": chunks,
                        "bytes": size,
                        "time_us": s.time_us,
                        "best_seed": st["best_seed"],
                        "seed_times_us": st["seed_times_us"],
                        "synthesis_s": wall,
                    }
                )
                print(f"{name:55s} {coll:10s} c={chunks} best {s.time_us:10.2f} us  {wall:6.2f}s", flush=True)
    return rows


def compare(old_path: str, new_path: str, md: str | None) -> None:
    with open(old_path) as f:
        old = json.load(f)["rows"]
    with open(new_path) as f:
        new = json.load(f)["rows"]
    key = lambda r: (r["topology"], r["collective"], r["chunks_per_npu"], r["bytes"])  # noqa: E731
    by_old = {key(r): r for r in old}
    lines = [
        "| topology | NPUs | coll | chunks/NPU | best before (us) | best after (us) | after/before "
        "| mean of seeds before | after | seeds | synth s before | after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    worse = 0
    for r in new:
        o = by_old.get(key(r))
        if o is None:
            continue
        ratio = r["time_us"] / o["time_us"]
        worse += ratio > 1 + 1e-12
        mo = sum(o["seed_times_us"]) / len(o["seed_times_us"])
        mn = sum(r["seed_times_us"]) / len(r["seed_times_us"])
        lines.append(
            f"| {r['topology']} | {r['npus']} | {r['collective']} | {r['chunks_per_npu']} "
            f"| {o['time_us']:.2f} | {r['time_us']:.2f} | {ratio:.4f} | {mo:.2f} | {mn:.2f} "
            f"| {len(r['seed_times_us'])} "
            f"| {o['synthesis_s']:.2f} | {r['synthesis_s']:.2f} |"
        )
    lines.append("")
    lines.append(f"rows where the best time got worse: {worse}")
    text = "\n".join(lines) + "\n"
    print(text)
    if md:
        with open(md, "w") as f:
            f.write(text)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    ap.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    ap.add_argument("--md")
    a = ap.parse_args()
    if a.compare:
        compare(a.compare[0], a.compare[1], a.md)
        return
    rows = run(a.seeds, a.threads)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"seeds": a.seeds, "rows": rows}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
