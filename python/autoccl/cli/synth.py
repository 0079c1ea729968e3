"""`autoccl synth` and `autoccl sim`: topology-aware collective synthesis and simulation."""

from __future__ import annotations

import json
import resource
import time
from pathlib import Path
from typing import Any

import click

from autoccl import synth as S
from autoccl.cli import options as O
from autoccl.synth.topofile import TopologyFileError


def _gen_options(opts: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for o in opts:
        key, eq, val = o.partition("=")
        if not eq:
            raise click.BadParameter(f"{o!r}: expected key=value", param_hint="--gen-opt")
        if "," in val:
            parts = val.split(",")
            try:
                out[key] = [float(x) for x in parts]
            except ValueError:
                out[key] = parts
        else:
            try:
                out[key] = int(val) if key in ("degree", "rails") else float(val)
            except ValueError:
                out[key] = [val] if key == "dim_types" else val
    return out


def _topology(
    topology: str | None,
    gen: str | None,
    bandwidth: float | None,
    latency: float | None,
    gen_opt: tuple[str, ...],
) -> Any:
    if bool(topology) == bool(gen):
        raise click.UsageError("give exactly one of --topology FILE or --gen KIND:DIMS")
    try:
        if topology:
            return S.load_topology(topology)
        assert gen is not None
        return S.parse_gen_spec(gen, bandwidth, latency, _gen_options(gen_opt))
    except (TopologyFileError, ValueError) as e:
        raise click.ClickException(str(e)) from e


# The topology of `synth` and `sim`, from a file or a generator, handed over built (one argument `topo`).
_with_topo = O.gathered(
    "topo",
    _topology,
    click.option(
        "--topology", "-t", type=click.Path(exists=True, dir_okay=False), help="topology file (YAML/JSON)"
    ),
    click.option("--gen", "-g", help="generator KIND:DIMS, e.g. mesh:16x16, torus:8x8x8, cluster:8x4"),
    click.option("--bw", "bandwidth", type=float, help="generator link bandwidth (GB/s)"),
    click.option("--lat", "latency", type=float, help="generator link latency (us)"),
    click.option(
        "--gen-opt", multiple=True, help="extra generator parameter key=value (e.g. dim_types=ring,fc,switch)"
    ),
)


def _plots(topo: Any, sim: dict[str, Any], heatmap: str | None, timeline: str | None, title: str) -> None:
    if heatmap or timeline:
        from autoccl.synth import plots

        if heatmap:
            plots.heatmap(topo, sim["link_util"], heatmap, title=title)
        if timeline:
            plots.timeline(topo, sim["timed"], timeline, title=title)


@click.command()
@_with_topo
@click.option("--collective", "-c", type=click.Choice(S.COLLECTIVES), default="allgather", show_default=True)
@click.option("--size", "-s", default="1G", show_default=True, help="collective size (binary units: 64M, 1G)")
@click.option(
    "--chunks", type=int, default=1, show_default=True, help="chunks per NPU (per root for bcast/reduce)"
)
@click.option("--seeds", type=int, default=4, show_default=True, help="best of this many seeds")
@click.option("--seed", type=int, default=1, show_default=True, help="first seed")
@click.option("--threads", type=int, default=0, help="threads for the seeds (0: all cores)")
@click.option("--root", type=int, default=0, show_default=True)
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="schedule JSON to write")
@click.option("--msccl-xml", type=click.Path(dir_okay=False), help="export to MSCCL XML")
@click.option("--mscclpp-json", type=click.Path(dir_okay=False), help="export to an MSCCL++ execution plan")
@click.option("--report", type=click.Path(dir_okay=False), help="JSON report to write")
@click.option(
    "--check/--no-check", default=True, show_default=True, help="prove the schedule with the checker"
)
@click.option(
    "--no-schedule", is_flag=True, help="estimate the time only; keep no transfer list (huge topologies)"
)
@click.option("--heatmap", type=click.Path(dir_okay=False), help="link-utilization heat map (PNG)")
@click.option("--timeline", type=click.Path(dir_okay=False), help="time-line chart (PNG)")
def synth(
    topo: Any,
    collective: str,
    size: str,
    chunks: int,
    seeds: int,
    seed: int,
    threads: int,
    root: int,
    out: str | None,
    msccl_xml: str | None,
    mscclpp_json: str | None,
    report: str | None,
    check: bool,
    no_schedule: bool,
    heatmap: str | None,
    timeline: str | None,
) -> None:
    """Synthesize a collective schedule for a topology (TACOS, done completely)."""
    try:
        nbytes = S.parse_size(size)
        t0 = time.perf_counter()
        sched, stats = S.synthesize(
            topo,
            collective,
            nbytes,
            chunks=chunks,
            seeds=seeds,
            threads=threads,
            seed=seed,
            root=root,
            record=not no_schedule,
        )
        synth_s = time.perf_counter() - t0
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    lb = S.lower_bound(topo, collective, nbytes)
    rep: dict[str, Any] = {
        "topology": topo.name,
        "npus": topo.num_npus,
        "links": topo.num_links,
        "collective": collective,
        "bytes": nbytes,
        "chunks_per_npu": chunks,
        "seeds": seeds,
        "first_seed": seed,
        "best_seed": stats["best_seed"],
        "time_us": sched.time_us,
        "algbw_gbps": nbytes / (sched.time_us * 1e3) if sched.time_us > 0 else 0.0,
        "lower_bound_us": lb,
        "gap_to_lower_bound": sched.time_us / lb - 1 if lb > 0 else None,
        "synthesis_s": synth_s,
        "transfers": stats["transfers"],
        "seed_times_us": stats["seed_times_us"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if not no_schedule:
        if check:
            res = S.check(sched, topo)
            rep["check"] = {"ok": res["ok"], "errors": res["errors"], "redundant": res["redundant"]}
            if not res["ok"]:
                raise click.ClickException("checker rejected the schedule: " + "; ".join(res["errors"][:3]))
        sim = S.simulate(topo, sched)
        rep["simulated_time_us"] = sim["time_us"]
        if out:
            S.save_schedule(sched, out, topo)
        try:
            if msccl_xml:
                Path(msccl_xml).write_text(S.to_msccl_xml(sched))
            if mscclpp_json:
                Path(mscclpp_json).write_text(S.to_mscclpp_json(sched, topo))
        except ValueError as e:
            raise click.ClickException(f"export: {e}") from e
        _plots(topo, sim, heatmap, timeline, f"TACOS {collective} on {topo.name}")
    click.echo(
        f"{collective} on {topo.name} ({topo.num_npus} NPUs), {nbytes:.0f} B: {sched.time_us:.2f} us "
        f"(lower bound {lb:.2f} us, gap {100 * (sched.time_us / lb - 1):.2f}%), "
        f"synthesized in {synth_s:.3f} s, {stats['transfers']} transfers"
    )
    if report:
        Path(report).write_text(json.dumps(rep, indent=2) + "\n")


@click.command()
@_with_topo
@click.option(
    "--schedule", "schedule_path", type=click.Path(exists=True, dir_okay=False), help="schedule JSON"
)
@click.option("--baseline", "-b", "algo", type=click.Choice([*S.BASELINES, "all"]), help="baseline algorithm")
@click.option("--collective", "-c", type=click.Choice(S.COLLECTIVES), default="allgather", show_default=True)
@click.option("--size", "-s", default="1G", show_default=True)
@click.option("--chunks", type=int, default=1, show_default=True)
@click.option("--root", type=int, default=0, show_default=True)
@click.option("--check/--no-check", default=True, show_default=True)
@click.option("--report", type=click.Path(dir_okay=False), help="JSON report to write")
@click.option("--heatmap", type=click.Path(dir_okay=False), help="link-utilization heat map (PNG)")
@click.option("--timeline", type=click.Path(dir_okay=False), help="time-line chart (PNG)")
def sim(
    topo: Any,
    schedule_path: str | None,
    algo: str | None,
    collective: str,
    size: str,
    chunks: int,
    root: int,
    check: bool,
    report: str | None,
    heatmap: str | None,
    timeline: str | None,
) -> None:
    """Simulate a schedule or a baseline algorithm on a topology (congestion-aware)."""
    if bool(schedule_path) == bool(algo):
        raise click.UsageError("give exactly one of --schedule FILE or --baseline ALGO")
    try:
        if schedule_path:
            items = [("schedule", S.load_schedule(schedule_path))]
        else:
            algos: tuple[str, ...] = S.BASELINES if algo == "all" else (str(algo),)
            items = []
            for a in algos:
                try:
                    items.append((a, S.baseline(topo, a, collective, size, chunks=chunks, root=root)))
                except ValueError as e:
                    if algo != "all":
                        raise
                    click.echo(f"{a}: skipped ({e})")
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    results = []
    for name, sched in items:
        try:
            res = S.simulate(topo, sched)
        except ValueError as e:
            raise click.ClickException(f"{name}: {e}") from e
        entry: dict[str, Any] = {
            "name": name,
            "algorithm": sched.algorithm,
            "collective": sched.collective,
            "bytes": sched.bytes,
            "time_us": res["time_us"],
            "algbw_gbps": res["algbw_gbps"],
            "max_link_util": max(res["link_util"], default=0.0),
        }
        if check:
            c = S.check(res["timed"], topo)
            entry["check_ok"] = c["ok"]
            if not c["ok"]:
                entry["check_errors"] = c["errors"][:5]
        results.append(entry)
        click.echo(
            f"{name}: {sched.collective} {res['time_us']:.2f} us, algbw {res['algbw_gbps']:.2f} GB/s"
            + ("" if not check else f", check {'ok' if entry['check_ok'] else 'FAILED'}")
        )
        if len(items) == 1:
            _plots(topo, res, heatmap, timeline, f"{name} {sched.collective} on {topo.name}")
    if report:
        Path(report).write_text(
            json.dumps({"topology": topo.name, "npus": topo.num_npus, "results": results}, indent=2) + "\n"
        )
