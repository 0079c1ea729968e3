"""autoccl synth next to public TACOS v1.3.0 on the same topologies: All-Gather time, bound, synthesis time.

Public TACOS is never stored in this repository. Give a checkout of astra-sim/tacos v1.3.0 with --tacos-src or
the environment variable TACOS_SRC (for instance `git clone --branch v1.3.0 https://github.com/astra-sim/tacos`);
this script copies its sources into build/tacos-compare/ (git-ignored), inserts two recording hooks into the
copy of its synthesizer (see tacos_driver.cpp), and builds two programs with g++ -O3:
  * tacos-public: TACOS unchanged (the hooks only record what it delivers);
  * tacos-causal: chunk replacement only takes a chunk the link's source held when the transfer started
    (public TACOS takes one it holds when the transfer ends: a chunk can be forwarded before it arrived).
Every schedule (both TACOS variants', from the recorded transfers, and ours) is proven by autoccl's checker
on the same topology; TACOS's forwarded-before-arrival transfers are counted.

    python benchmarks/synth/tacos_compare.py --tacos-src /path/to/tacos-v1.3.0 --runs 3 \\
        --out-dir benchmarks/results/cpu/synthesis/tacos_comparison

Same model on both sides: directed links with latency alpha and bandwidth beta, a transfer of a chunk costs
alpha + bytes / beta and holds its link, 1 GiB All-Gather (chunk bytes = 1 GiB / (NPUs x chunks), rounded
down to whole bytes as TACOS does; our buffer is set to chunk bytes x chunks so both move the same chunks),
collective time = arrival of the last chunk. TACOS bandwidths are GiB/s, ours GB/s (converted exactly).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from autoccl import synth as S

REPO = Path(__file__).resolve().parents[2]
GIB = 2**30 / 1e9  # GB/s per GiB/s
SIZE = 2**30

# name, description, builder (returns a topology with NPUs only)
TopoSpec = tuple[str, str, dict[str, Any]]
TOPOLOGIES: list[TopoSpec] = [
    ("mesh_8x8", "2D mesh 8x8, 50 GiB/s, 0.5 us", {"generator": {"kind": "mesh", "dims": [8, 8]}}),
    (
        "mesh_5x5_hetero",
        "2D mesh 5x5, x 50 / y 75 GiB/s (TACOS's Mesh2D_Hetero test)",
        {"generator": {"kind": "mesh", "dims": [5, 5], "dim_bandwidth_gbps": [50 * GIB, 75 * GIB]}},
    ),
    (
        "mesh_8x8_degraded",
        "2D mesh 8x8 with NPU 27 and links 9-10, 34-42, 50-51 failed (63 NPUs)",
        {
            "generator": {"kind": "mesh", "dims": [8, 8]},
            "failed": {
                "nodes": ["npu27"],
                "links": [["npu9", "npu10"], ["npu10", "npu9"], ["npu34", "npu42"], ["npu50", "npu51"]],
            },
        },
    ),
    ("torus_8x8x8", "3D torus 8x8x8, 50 GiB/s", {"generator": {"kind": "torus", "dims": [8, 8, 8]}}),
    (
        "torus_8x8x8_hetero",
        "3D torus 8x8x8, x/y 50 GiB/s, z 25 GiB/s",
        {
            "generator": {
                "kind": "torus",
                "dims": [8, 8, 8],
                "dim_bandwidth_gbps": [50 * GIB, 50 * GIB, 25 * GIB],
            }
        },
    ),
    ("hypercube_64", "6-D hypercube (64 NPUs), 50 GiB/s", {"generator": {"kind": "hypercube", "dims": [6]}}),
    (
        "dragonfly_8x16",
        "dragonfly, 8 groups x 16 routers (one NPU each), local 50 GB/s, global 12.5 GB/s",
        {
            "generator": {
                "kind": "dragonfly",
                "dims": [8, 16],
                "bandwidth_gbps": 50.0,
                "global_bandwidth_gbps": 12.5,
            }
        },
    ),
    (
        "rail_fc_8x8",
        "8 hosts x 8 GPUs: NVSwitch unwound (all-to-all, 450/7 GB/s per link), rails all-to-all (50/7 GB/s)",
        {
            "generator": {
                "kind": "multidim",
                "dims": [8, 8],
                "dim_types": ["fc", "fc"],
                "dim_bandwidth_gbps": [450 / 7, 50 / 7],
            }
        },
    ),
    (
        "rail_ring_8x8",
        "8 hosts x 8 GPUs: NVSwitch unwound (450/7 GB/s per link), rails as rings (25 GB/s each way)",
        {
            "generator": {
                "kind": "multidim",
                "dims": [8, 8],
                "dim_types": ["fc", "ring"],
                "dim_bandwidth_gbps": [450 / 7, 25.0],
            }
        },
    ),
]
DEFAULT_LATENCY = 0.5
DEFAULT_BW = 50 * GIB

# Two places in TACOS v1.3.0's src/synthesizer/synthesizer.cpp: where a chunk arrives, and the condition of
# its chunk replacement. The hooks are declared at the top of the copy.
_ARRIVAL = "chunkMap_[chunk][dest] = true;"
_REPLACE = "if (chunkMap_[chunk][src] && !chunkMap_[chunk][dest]) {"


def _topology(spec: dict[str, Any]) -> Any:
    doc = json.loads(json.dumps(spec))
    gen = doc["generator"]
    gen.setdefault("bandwidth_gbps", DEFAULT_BW)
    gen.setdefault("latency_us", DEFAULT_LATENCY)
    if gen["kind"] == "dragonfly":
        gen.setdefault("global_latency_us", DEFAULT_LATENCY)
    return S.topology_from_dict(doc)


def _edges(t: Any) -> tuple[str, dict[tuple[int, int], int]]:
    """TACOS edge list (ranks, GiB/s, us) and (src rank, dst rank) -> our link id."""
    rank = {name: r for r, name in enumerate(t.ranks)}
    lines = [f"npus {t.num_npus}"]
    link_id: dict[tuple[int, int], int] = {}
    for i, (a, b, lat, bw) in enumerate(t.links):
        if a not in rank or b not in rank:
            raise SystemExit(f"{t.name}: TACOS takes NPU-to-NPU links only ({a} -> {b})")
        link_id[(rank[a], rank[b])] = i
        lines.append(f"{rank[a]} {rank[b]} {bw / GIB!r} {lat!r}")
    return "\n".join(lines) + "\n", link_id


def _build(src: Path, out: Path) -> dict[str, Path]:
    """Copy TACOS's sources, insert the hooks, build tacos-public and tacos-causal."""
    syn = src / "src" / "synthesizer" / "synthesizer.cpp"
    if not syn.is_file() or not (src / "include" / "tacos" / "synthesizer" / "synthesizer.h").is_file():
        raise SystemExit(
            f"{src}: not a TACOS source tree (no src/synthesizer/synthesizer.cpp); give a checkout of "
            "astra-sim/tacos v1.3.0 with --tacos-src or TACOS_SRC"
        )
    text = syn.read_text()
    for anchor in (_ARRIVAL, _REPLACE):
        if text.count(anchor) != 1:
            raise SystemExit(f"{syn}: expected '{anchor}' once (is this TACOS v1.3.0?)")
    hooks = (
        "extern void tacos_hook_arrival(int src, int dst, int chunk, double start, double end);\n"
        "extern bool tacos_hook_held_at(int npu, int chunk, double t);\n"
    )
    arrival = (
        "tacos_hook_arrival(src, dest, chunk, currentTime_ - ten_->linkTransferTime(src, dest), "
        "currentTime_);\n"
        "            " + _ARRIVAL
    )
    bins: dict[str, Path] = {}
    out.mkdir(parents=True, exist_ok=True)
    for variant, cond in (
        ("public", "true"),
        ("causal", "tacos_hook_held_at(src, chunk, currentTime_ - ten_->linkTransferTime(src, dest))"),
    ):
        tree = out / f"src-{variant}"
        if tree.exists():
            shutil.rmtree(tree)
        shutil.copytree(src / "src", tree / "src")
        shutil.copytree(src / "include", tree / "include")
        patched = hooks + text.replace(_ARRIVAL, arrival).replace(
            _REPLACE, _REPLACE.replace(") {", f" && {cond}) {{")
        )
        (tree / "src" / "synthesizer" / "synthesizer.cpp").write_text(patched)
        sources = [p for p in sorted((tree / "src").rglob("*.cpp")) if p.name != "main.cpp"]
        exe = out / f"tacos-{variant}"
        cmd = [
            os.environ.get("CXX", "g++"),
            "-O3",
            "-DNDEBUG",
            "-std=c++17",
            f"-I{tree / 'include'}",
            f"-I{tree / 'include' / 'tacos'}",
            str(Path(__file__).with_name("tacos_driver.cpp")),
            *map(str, sources),
            "-o",
            str(exe),
        ]
        import hashlib

        stamp = exe.with_suffix(".stamp")
        digest = hashlib.sha256(
            (patched + Path(cmd[6]).read_text() + " ".join(cmd[:4])).encode()
            + b"".join(p.read_bytes() for p in sources)
        ).hexdigest()
        if not (exe.is_file() and stamp.is_file() and stamp.read_text() == digest):
            print(f"building {exe.name}", flush=True)
            subprocess.run(cmd, check=True)
            stamp.write_text(digest)
        bins[variant] = exe
    return bins


def _run_tacos(
    exe: Path, edges: Path, chunks: int, chunk_bytes: int, runs: int, timeout: float, cache: Path | None
) -> dict[str, Any]:
    """TACOS's output; with a cache file, a previous output for the same edges and build is reused."""
    key = f"{exe.name} {chunks} {chunk_bytes} {runs} {hash_file(exe)} {hash_file(edges)}"
    if cache is not None and cache.is_file():
        data = json.loads(cache.read_text())
        if data.get("key") == key:
            return dict(data["out"])
    try:
        p = subprocess.run(
            [str(exe), str(edges), str(chunks), str(chunk_bytes), str(runs)],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
    except subprocess.TimeoutExpired:
        out: dict[str, Any] = {"timeout_s": timeout}
    else:
        out = dict(json.loads(p.stdout))
    if cache is not None:
        cache.write_text(json.dumps({"key": key, "out": out}))
    return out


def hash_file(p: Path) -> str:
    import hashlib

    return hashlib.sha256(p.read_bytes()).hexdigest()[:16]


def _tacos_schedule(
    t: Any, link_id: dict[tuple[int, int], int], rows: list[list[float]], chunks: int, chunk_bytes: int
) -> Any:
    n = t.num_npus
    s = S.ext().Schedule()
    s.collective = "allgather"
    s.algorithm = "tacos-v1.3.0"
    s.nranks = n
    s.nchunks = n * chunks
    s.chunks_per_rank = chunks
    s.chunk_bytes = float(chunk_bytes)
    s.bytes = float(chunk_bytes) * n * chunks
    s.owner = [c % n for c in range(n * chunks)]
    s.routes = [[i] for i in range(t.num_links)]
    a = np.array(rows, dtype=np.float64).reshape(len(rows), 5)
    src, dst = a[:, 1].astype(np.int32), a[:, 2].astype(np.int32)
    route = np.array([link_id[(int(x), int(y))] for x, y in zip(src, dst, strict=True)], dtype=np.int32)
    zeros = np.zeros(len(rows), dtype=np.int32)
    s.set_transfers(a[:, 0].astype(np.int32), src, dst, a[:, 3], a[:, 4], zeros, route, zeros)
    s.time_us = float(a[:, 4].max()) if len(rows) else 0.0
    return s


def _forwarded_early(rows: list[list[float]], n: int) -> int:
    """Transfers whose source did not yet hold the chunk when they started (owner holds its chunk at 0)."""
    arrival: dict[tuple[int, int], float] = {}
    for c, _s, d, _t0, t1 in rows:
        key = (int(c), int(d))
        arrival[key] = min(arrival.get(key, math.inf), t1)
    bad = 0
    for c, s, _d, t0, _t1 in rows:
        held = 0.0 if int(c) % n == int(s) else arrival.get((int(c), int(s)), math.inf)
        bad += held > t0 + 1e-6
    return bad


def _tacos_side(
    t: Any, link_id: dict[tuple[int, int], int], out: dict[str, Any], chunks: int, chunk_bytes: int
) -> dict[str, Any]:
    if "timeout_s" in out:
        return {"timeout_s": out["timeout_s"]}
    runs = out["runs"]
    best = min(r["time_us"] for r in runs)
    rows = out["best_transfers"]
    sched = _tacos_schedule(t, link_id, rows, chunks, chunk_bytes)
    chk = S.check(sched, t)
    return {
        "best_us": best,
        "times_us": [r["time_us"] for r in runs],
        "synth_s_per_run": sum(r["synth_s"] for r in runs) / len(runs),
        "check_ok": chk["ok"],
        "check_errors": chk["errors"][:3],
        "forwarded_before_arrival": _forwarded_early(rows, t.num_npus),
        "transfers": len(rows),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--tacos-src", type=Path, default=os.environ.get("TACOS_SRC"), help="TACOS v1.3.0 checkout"
    )
    ap.add_argument("--build-dir", type=Path, default=REPO / "build" / "tacos-compare")
    ap.add_argument("--runs", type=int, default=3, help="TACOS runs per variant (random seeds), best kept")
    ap.add_argument("--seeds", type=int, default=0, help="our seeds (0: autoccl synth's default)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for all runs of one TACOS variant")
    ap.add_argument("--only", nargs="*", help="topology names (default: all)")
    ap.add_argument(
        "--reuse-tacos",
        action="store_true",
        help="reuse TACOS outputs an earlier run kept in the build directory (same build and inputs)",
    )
    ap.add_argument("--out-dir", type=Path, required=True)
    a = ap.parse_args()
    if a.tacos_src is None or not Path(a.tacos_src).is_dir():
        sys.exit(
            "public TACOS not found: pass --tacos-src DIR or set TACOS_SRC to a checkout of astra-sim/tacos "
            "v1.3.0 (git clone --branch v1.3.0 https://github.com/astra-sim/tacos); it is built beside the "
            "project, never stored in it"
        )
    bins = _build(Path(a.tacos_src), a.build_dir)
    a.out_dir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for name, desc, spec in TOPOLOGIES:
        if a.only and name not in a.only:
            continue
        t = _topology(spec)
        n = t.num_npus
        seeds = a.seeds or S.default_seeds(t)
        edges_text, link_id = _edges(t)
        edges = a.build_dir / f"{name}.edges"
        edges.write_text(edges_text)
        print(f"== {name} ({n} NPUs)", flush=True)
        # ours, default settings (chunks chosen by trial, default seeds)
        t0 = time.perf_counter()
        ours, st = S.synthesize(t, "allgather", SIZE, chunks=0, seeds=seeds, threads=a.threads)
        ours_s = time.perf_counter() - t0
        k = int(st["chunks_per_rank"])
        trials = st["chunk_trials"]
        chunk_bytes = SIZE // (n * k)
        if chunk_bytes * n * k != SIZE:  # same whole-byte chunks as TACOS
            t0 = time.perf_counter()
            ours, st = S.synthesize(
                t, "allgather", chunk_bytes * n * k, chunks=k, seeds=seeds, threads=a.threads
            )
            ours_s += time.perf_counter() - t0
        ours_chk = S.check(ours, t)
        one_bytes = SIZE // n
        t0 = time.perf_counter()
        ours1, _ = S.synthesize(t, "allgather", one_bytes * n, chunks=1, seeds=seeds, threads=a.threads)
        ours1_s = time.perf_counter() - t0
        ours1_chk = S.check(ours1, t)
        bound = S.lower_bounds(t, "allgather", one_bytes * n)
        row: dict[str, Any] = {
            "topology": name,
            "description": desc,
            "npus": n,
            "links": t.num_links,
            "lower_bound_us": max(bound["time_us"], bound["model_us"]),
            "bandwidth_bound_us": bound["time_us"],
            "bandwidth_bound_from": f"{bound['kind']}: {bound['what']}",
            "latency_bound_us": bound["model_us"],
            "latency_bound_from": bound["model_what"],
            "ours": {
                "time_us": ours.time_us,
                "chunks_per_npu": k,
                "chunk_trials": trials,
                "seed_times_us": st["seed_times_us"],
                "seeds": seeds,
                "synth_s": ours_s,
                "check_ok": ours_chk["ok"],
            },
            "ours_1_chunk": {"time_us": ours1.time_us, "synth_s": ours1_s, "check_ok": ours1_chk["ok"]},
        }
        for variant in ("public", "causal"):
            for chunks in sorted({1, k}):
                cb = SIZE // (n * chunks)
                print(f"   tacos-{variant}, {chunks} chunk(s) per NPU", flush=True)
                cache = a.build_dir / f"{name}.{variant}.{chunks}.json" if a.reuse_tacos else None
                out = _run_tacos(bins[variant], edges, chunks, cb, a.runs, a.timeout, cache)
                side = _tacos_side(t, link_id, out, chunks, cb)
                side["chunks_per_npu"] = chunks
                row[f"tacos_{variant}_{chunks}"] = side
        rows.append(row)
        print(
            json.dumps({k2: v for k2, v in row.items() if k2 != "description"}, default=str)[:600], flush=True
        )
        _write(a, rows)


def _fmt(side: dict[str, Any] | None) -> str:
    if side is None:
        return "–"
    if "timeout_s" in side:
        return f"> {side['timeout_s']:.0f} s"
    mark = "" if side["check_ok"] else " ✗"
    return f"{side['best_us']:.0f}{mark}"


def _secs(side: dict[str, Any] | None) -> str:
    """Seconds per TACOS run, or what stopped it."""
    if not side:
        return "–"
    if "timeout_s" in side:
        return f"> {side['timeout_s']:.0f}"
    return f"{side['synth_s_per_run']:.2f}"


def _write(a: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
    meta = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "tacos_src": str(a.tacos_src),
        "size_bytes": SIZE,
        "runs": a.runs,
        "seeds": a.seeds,
    }
    (a.out_dir / "results.json").write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    head = (
        "| topology | NPUs | bound (us) | TACOS public (us) | early fwd | TACOS causal (us) "
        "| ours 1 chunk (us) "
        "| ours (us) | chunks | ours / bound | ours / TACOS causal | TACOS causal at our chunks (us) "
        "| TACOS causal s/run (1 chunk; our chunks) | TACOS public s/run (our chunks) | ours s |\n|"
        + "---|" * 15
        + "\n"
    )
    lines = []
    for r in rows:
        k = r["ours"]["chunks_per_npu"]
        pub, cau = r.get("tacos_public_1"), r.get("tacos_causal_1")
        cau_k = r.get(f"tacos_causal_{k}") if k != 1 else cau
        best_causal = min(
            (x["best_us"] for x in (cau, cau_k) if x and "best_us" in x and x["check_ok"]), default=math.nan
        )
        early = pub.get("forwarded_before_arrival", "–") if pub else "–"
        pub_k = r.get(f"tacos_public_{k}") if k != 1 else pub
        tacos_s = f"{_secs(cau)}; {_secs(cau_k)}" if k != 1 else _secs(cau)
        lines.append(
            f"| {r['topology']} | {r['npus']} | {r['lower_bound_us']:.0f} | {_fmt(pub)} | {early} "
            f"| {_fmt(cau)} "
            f"| {r['ours_1_chunk']['time_us']:.0f} | {r['ours']['time_us']:.0f} | {k} "
            f"| {r['ours']['time_us'] / r['lower_bound_us']:.3f} | {r['ours']['time_us'] / best_causal:.3f} "
            f"| {_fmt(cau_k) if k != 1 else '(same)'} | {tacos_s} | {_secs(pub_k)} "
            f"| {r['ours']['synth_s']:.2f} |"
        )
    (a.out_dir / "table.md").write_text(head + "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
