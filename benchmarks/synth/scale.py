"""Large-mesh synthesis: time and peak memory of All-Reduce (or All-Gather) on a W x H 2D mesh.

    taskset -c 0,1 /usr/bin/time -v python benchmarks/synth/scale.py --dims 200 200 --collective allreduce \
        --threads 2 --out result.json

Runs without keeping the transfer list (record=False): a 40,000-NPU All-Reduce moves 3.2e9 chunk transfers.
With one seed and 2 threads the seed's destinations are split between the threads. The load average before
and after is recorded: the machine may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time

from autoccl import synth as S


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dims", type=int, nargs="+", default=[200, 200])
    ap.add_argument("--kind", default="mesh")
    ap.add_argument("--collective", default="allreduce")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0)
    ap.add_argument("--out")
    a = ap.parse_args()
    gib = 2**30 / 1e9
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    topo = S.generate(a.kind, a.dims, bandwidth=50 * gib, latency=0.5)
    build_s = time.perf_counter() - t0
    t1 = time.perf_counter()
    sched, st = S.synthesize(topo, a.collective, a.size, seeds=a.seeds, threads=a.threads, record=False)
    synth_s = time.perf_counter() - t1
    lb = S.lower_bound(topo, a.collective, a.size)
    res = {
        "topology": f"{a.kind} {'x'.join(map(str, a.dims))}",
        "npus": topo.num_npus,
        "collective": a.collective,
        "bytes": S.parse_size(a.size),
        "seeds": a.seeds,
        "time_us": sched.time_us,
        "lower_bound_us": lb,
        "gap_to_lower_bound": sched.time_us / lb - 1,
        "transfers": st["transfers"],
        "topology_build_s": build_s,
        "synthesis_s": synth_s,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "max_queue_entries": st["max_queue_entries"],
        "threads": a.threads,
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "affinity_cores": len(os.sched_getaffinity(0)),
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
    }
    print(json.dumps(res, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
