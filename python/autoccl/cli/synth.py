"""`autoccl synth` and `autoccl sim`: topology-aware collective synthesis and simulation."""

from __future__ import annotations

import resource
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from autoccl import jsonout
from autoccl import synth as S
from autoccl.cli import options as O
from autoccl.cli.files import drop_stdout, refuse_same_file, refuse_unwritable
from autoccl.synth.topofile import TopologyFileError


def _generator_options(opts: tuple[str, ...]) -> dict[str, Any]:
    """--gen-opt key=value ... as the generator's parameters: numbers where they read as numbers, lists
    where the value has commas (dim_types, per-dimension bandwidths and latencies)."""
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
            if key in ("dim_bandwidth_gbps", "dim_latency_us") and not isinstance(out[key], str):
                out[key] = [out[key]]  # one dimension
    return out


def generated_topology(
    gen: str, bandwidth: float | None, latency: float | None, gen_opt: tuple[str, ...]
) -> Any:
    """`--gen KIND:DIMS` with `--bw`, `--lat` and `--gen-opt`, built (the synthesizer's Topology). A spec or
    parameter the generator refuses is a usage error naming it (exit status 2, as a bad --size), where a bad
    topology file is an error of its own (status 1)."""
    options = _generator_options(gen_opt)
    for key, value, option, what in (
        ("bandwidth_gbps", bandwidth, "--bw", "bandwidth"),
        ("latency_us", latency, "--lat", "latency"),
    ):
        if key in options and value is not None:  # --gen-opt's value won, the other was dropped silently
            raise click.UsageError(f"{option} and --gen-opt {key}= both set the link {what}: give one")
    try:
        return S.parse_gen_spec(gen, bandwidth, latency, options)
    except (TopologyFileError, ValueError) as e:
        raise click.UsageError(str(e)) from e


# The link parameters of --gen, for every command that takes a generated topology.
generator_parameters = O.stack(
    click.option("--bw", "bandwidth", type=float, help="generator link bandwidth (GB/s)"),
    click.option("--lat", "latency", type=float, help="generator link latency (us)"),
    click.option(
        "--gen-opt", multiple=True, help="extra generator parameter key=value (e.g. dim_types=ring,fc,switch)"
    ),
)


def _topology(
    topology: str | None,
    gen: str | None,
    bandwidth: float | None,
    latency: float | None,
    gen_opt: tuple[str, ...],
) -> Any:
    if bool(topology) == bool(gen):
        raise click.UsageError("give exactly one of --topology FILE or --gen KIND:DIMS")
    if not gen and (bandwidth is not None or latency is not None or gen_opt):  # a file's links are its own
        raise click.UsageError("--bw, --lat and --gen-opt are parameters of --gen's generator")
    if gen:
        return generated_topology(gen, bandwidth, latency, gen_opt)
    try:
        assert topology is not None
        return S.load_topology(topology)
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
    generator_parameters,
)


# Streams up to this many transfers are re-read and checked (about 2 GiB of memory).
_STREAM_CHECK_LIMIT = 2e7

# Bounds of the integer options: the C++ types they go to (int, uint64), and sane caps where the type's
# range would only exhaust memory or threads (a vector per seed, a thread per seed).
_INT_MAX = 2**31 - 1
_MAX_SEEDS = 1_000_000
_MAX_THREADS = 4096


def _say(text: str) -> None:
    """One line on stdout. When its reader has gone (`autoccl synth ... | head -1`), the rest of stdout is
    dropped and the work goes on: files are still written, the exit status is still the check's."""
    try:
        click.echo(text)
    except BrokenPipeError:
        drop_stdout()


# -s/--size of synth and sim: a whole number of bytes (1.5M is, 1.5 is not), positive, at most S.MAX_BYTES.
_SIZE = O.Bytes(
    most=S.MAX_BYTES,
    above=f"the largest size supported, {S.MAX_BYTES / 2**40:.0f}T (2^{int(S.MAX_BYTES).bit_length() - 1} "
    "bytes): the synthesizer's times (microseconds, double precision) cannot resolve link latencies in a "
    "collective that large",
)


def _check_chunk_bytes(nbytes: float, chunks: int, topo: Any, collective: str, option: str) -> None:
    """Refuse chunks of less than a byte: the size over 1 chunk per NPU (per root for broadcast/reduce) when
    the chunks are chosen (0; a larger count is never chosen below a byte), else over the chunks given."""
    rooted = collective in ("broadcast", "reduce")
    k = max(chunks, 1)
    count = k if rooted else topo.num_npus * k
    if nbytes / count < 1:
        per = "" if rooted else f": {topo.num_npus} NPUs x {k}"
        fewer = " or fewer chunks" if chunks > 1 else ""
        raise click.BadParameter(
            f"a chunk would hold {nbytes / count:.3g} bytes ({nbytes:.0f} B over {count} chunks{per}); "
            f"every chunk needs at least 1 byte: give a larger size{fewer}",
            param_hint=option,
        )


def _refuse_moot_root(collective: str) -> None:
    """--root with a collective that has none was dropped without a word (`synth -c allgather --root 2`)."""
    if _given("root") and collective not in ("broadcast", "reduce"):
        raise click.UsageError(f"--root is for broadcast and reduce; {collective} has no root")


def _given(name: str) -> bool:
    """Whether the option was given (on the command line or in the environment), not left at its default."""
    src = click.get_current_context().get_parameter_source(name)
    return src in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)


def _progress(label: str) -> Callable[[int, int], None]:
    """A progress callback for long checks: one line on stderr every few seconds."""
    last = [time.monotonic()]

    def show(done: int, total: int) -> None:
        now = time.monotonic()
        if now - last[0] >= 3.0 and total > 0:
            click.echo(f"{label}: {100 * done / total:.0f}% ({done:,} of {total:,} steps)", err=True)
            last[0] = now

    return show


def _synthesis_progress() -> Callable[[float, int], None]:
    """A progress callback for long syntheses: one line on stderr every few seconds (the total is not known
    ahead: seeds, chunk trials and phases each deliver every chunk to every NPU)."""
    last = [0.0]

    def show(seconds: float, deliveries: int) -> None:
        if seconds - last[0] >= 3.0:
            click.echo(f"synthesizing: {seconds:.0f} s, {deliveries:,} chunk deliveries so far", err=True)
            last[0] = seconds

    return show


def _plots(topo: Any, sim: dict[str, Any], heatmap: str | None, timeline: str | None, title: str) -> None:
    if heatmap or timeline:
        from autoccl.synth import plots

        if heatmap:
            plots.heatmap(topo, sim["link_util"], heatmap, title=title)
        if timeline:
            plots.timeline(topo, sim["timed"], timeline, title=title)


def _named(path: str | None, name: str) -> str | None:
    """`hm.png` -> `hm.ring.png`: one picture per baseline of `sim -b all`."""
    if not path:
        return None
    p = Path(path)
    return str(p.with_name(f"{p.stem}.{name}{p.suffix}"))


@click.command()
@_with_topo
@O.choice("--collective", "-c", values=S.COLLECTIVES, default="allgather")
@click.option(
    "--size",
    "-s",
    type=_SIZE,
    default="1G",
    show_default=True,
    help="collective size (binary units: 64M, 1G)",
)
@click.option(
    "--chunks",
    type=click.IntRange(0, _INT_MAX),
    default=0,
    help="chunks per NPU (per root for bcast/reduce); 0 (default): the fastest of a few counts tried "
    "(docs/synth.md, 'Chunks per NPU')",
)
@click.option(
    "--seeds",
    type=click.IntRange(0, _MAX_SEEDS),
    default=0,
    help="best of this many seeds (0, the default: 8 up to 5e6 deliveries per seed, 4 up to 5e7, else 1)",
)
@click.option("--seed", type=click.IntRange(0, 2**64 - 1), default=1, show_default=True, help="first seed")
@click.option(
    "--threads", type=click.IntRange(0, _MAX_THREADS), default=0, help="threads for the seeds (0: all cores)"
)
@click.option(
    "--root",
    type=click.IntRange(0, _INT_MAX),
    default=0,
    show_default=True,
    help="root rank (broadcast, reduce)",
)
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
@click.option(
    "--stream",
    type=click.Path(dir_okay=False),
    help="write the schedule to this file while it is made (binary, docs/synth.md), keeping none in memory",
)
@click.option(
    "--max-memory",
    type=click.FloatRange(min=0),
    help="GiB: refuse up front what would need more (default: this machine's memory; 0: no limit)",
)
@click.option(
    "--heatmap",
    type=click.Path(dir_okay=False),
    callback=O.picture_path,
    help="link-utilization heat map (format by extension: .png, .svg, .pdf, ...)",
)
@click.option(
    "--timeline",
    type=click.Path(dir_okay=False),
    callback=O.picture_path,
    help="time-line chart (format by extension: .png, .svg, .pdf, ...)",
)
def synth(
    topo: Any,
    collective: str,
    size: int,
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
    stream: str | None,
    max_memory: float | None,
    heatmap: str | None,
    timeline: str | None,
) -> None:
    """Synthesize a collective schedule for a topology (TACOS, done completely)."""
    refuse_same_file(
        ("--out", out),
        ("--msccl-xml", msccl_xml),
        ("--mscclpp-json", mscclpp_json),
        ("--report", report),
        ("--heatmap", heatmap),
        ("--timeline", timeline),
        ("--stream", stream),
    )
    refuse_unwritable(out, msccl_xml, mscclpp_json, report, heatmap, timeline, stream)
    if stream and (no_schedule or out or msccl_xml or mscclpp_json or heatmap or timeline):
        raise click.UsageError(
            "--stream keeps no schedule in memory: it cannot be combined with --no-schedule, -o, "
            "--msccl-xml, --mscclpp-json, --heatmap or --timeline"
        )
    if no_schedule and (out or msccl_xml or mscclpp_json or heatmap or timeline):
        raise click.UsageError(
            "--no-schedule keeps no transfer list: it cannot be combined with -o, --msccl-xml, "
            "--mscclpp-json, --heatmap or --timeline (--stream writes a schedule too large to keep)"
        )
    if (msccl_xml or mscclpp_json) and collective not in ("allgather", "reducescatter", "allreduce"):
        raise click.UsageError(
            f"--msccl-xml and --mscclpp-json export allgather, reducescatter and allreduce schedules, "
            f"not {collective}"
        )
    _refuse_moot_root(collective)
    if mscclpp_json and any(kind == "nic" for _, kind in topo.nodes):
        raise click.UsageError("--mscclpp-json is for single-host topologies; this one has NICs")
    nbytes = float(size)
    _check_chunk_bytes(nbytes, chunks, topo, collective, "--chunks" if chunks > 1 else "--size")
    if seeds == 0:
        seeds = S.default_seeds(topo)
    try:
        t0 = time.perf_counter()
        if stream:
            sched, stats = S.synthesize_to_stream(
                topo,
                collective,
                nbytes,
                stream,
                chunks=chunks,
                seeds=seeds,
                threads=threads,
                seed=seed,
                root=root,
                max_memory_gib=max_memory,
                progress=_synthesis_progress(),
            )
        else:
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
                max_memory_gib=max_memory,
                progress=_synthesis_progress(),
            )
        synth_s = time.perf_counter() - t0
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    except MemoryError as e:
        raise click.ClickException(
            f"out of memory during synthesis ({e}); --no-schedule or --stream keep no transfer list in memory"
        ) from e
    bound = S.lower_bounds(topo, collective, nbytes, root)
    lb = max(bound["time_us"], bound["model_us"])
    rep: dict[str, Any] = {
        "topology": topo.name,
        "npus": topo.num_npus,
        "links": topo.num_links,
        "collective": collective,
        "bytes": nbytes,
        "chunks_per_npu": stats["chunks_per_rank"],
        "chunk_trials": stats["chunk_trials"],
        "seeds": seeds,
        "first_seed": seed,
        "max_queue_entries": stats["max_queue_entries"],
        "best_seed": stats["best_seed"],
        "direct_pattern": stats.get("direct_pattern", False),
        "time_us": sched.time_us,
        "algbw_gbps": nbytes / (sched.time_us * 1e3) if sched.time_us > 0 else 0.0,
        "lower_bound_us": lb,
        "bandwidth_bound_us": bound["time_us"],
        "bandwidth_bound_from": f"{bound['kind']}: {bound['what']}",
        "per_npu_bandwidth_bound_us": bound["per_npu_us"],
        "latency_bound_us": bound["model_us"],
        "latency_bound_from": bound["model_what"],
        "gap_to_lower_bound": sched.time_us / lb - 1 if lb > 0 else None,
        "synthesis_s": synth_s,
        "transfers": stats["transfers"],
        "seed_times_us": stats["seed_times_us"],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
    if stream:
        rep["stream"] = {"path": stream, "bytes": stats["bytes_written"]}
        if check and stats["transfers"] <= _STREAM_CHECK_LIMIT:
            try:
                sched = S.load_schedule(stream, topo)
            except S.ScheduleError as e:
                raise click.ClickException(f"re-reading the stream: {e}") from e
            res = S.check(sched, topo, progress=_progress("checking"))
            rep["check"] = {"ok": res["ok"], "errors": res["errors"], "redundant": res["redundant"]}
            if not res["ok"]:
                raise click.ClickException("checker rejected the schedule: " + "; ".join(res["errors"][:3]))
        elif check:
            rep["check"] = None
            click.echo(
                f"not checked: {stats['transfers']:,} transfers; the check re-reads a stream of at most "
                f"{_STREAM_CHECK_LIMIT:,.0f} (--no-check to silence)",
                err=True,
            )
    elif not no_schedule:
        if check:
            res = S.check(sched, topo, progress=_progress("checking"))
            rep["check"] = {"ok": res["ok"], "errors": res["errors"], "redundant": res["redundant"]}
            if not res["ok"]:
                raise click.ClickException("checker rejected the schedule: " + "; ".join(res["errors"][:3]))
        sim = S.simulate(topo, sched)
        rep["simulated_time_us"] = sim["time_us"]
        # Every export is made before any file is written: one that fails leaves no output behind.
        try:
            xml = S.to_msccl_xml(sched) if msccl_xml else None
            plan = S.to_mscclpp_json(sched, topo) if mscclpp_json else None
        except ValueError as e:
            raise click.ClickException(f"export: {e}; nothing was written") from e
        if out:
            S.save_schedule(sched, out, topo)
        if msccl_xml and xml is not None:
            Path(msccl_xml).write_text(xml)
        if mscclpp_json and plan is not None:
            Path(mscclpp_json).write_text(plan)
        _plots(topo, sim, heatmap, timeline, f"TACOS {collective} on {topo.name}")
    verdict = ""
    if rep.get("check"):
        verdict = ", check ok"  # a rejected schedule stopped above
    elif check and no_schedule:
        verdict = ", not checked (--no-schedule keeps no transfers)"
    _say(
        f"{collective} on {topo.name} ({topo.num_npus} NPUs), {nbytes:.0f} B: {sched.time_us:.2f} us"
        + (f", {sched.time_us / lb:.3f}x the lower bound" if lb > 0 else "")
        + verdict
    )
    if lb > 0:
        parts = [f"{bound['time_us']:.2f} us from bandwidth ({bound['kind']}: {bound['what']})"]
        if bound["model_us"] > 0:
            parts.append(
                f"{bound['model_us']:.2f} us from latency plus bandwidth per transfer, one chunk of at most "
                f"bytes/NPUs each ({bound['model_what']})"
            )
        _say("  lower bounds: " + "; ".join(parts) + ("; the larger holds" if len(parts) > 1 else ""))
    direct = ", spreading by the direct pattern (faster than every seed)" * bool(stats.get("direct_pattern"))
    per = "root" if collective in ("broadcast", "reduce") else "NPU"
    _say(
        f"  {stats['chunks_per_rank']} chunk(s) per {per}{' (chosen)' if chunks == 0 else ''}, "
        f"{seeds} seed(s){direct}, synthesized in {synth_s:.3f} s, {stats['transfers']} transfers"
        + (f", {stats['bytes_written'] / 2**20:.1f} MiB streamed to {stream}" if stream else "")
    )
    if report:
        Path(report).write_text(jsonout.dumps(rep, indent=2) + "\n")
    written = [p for p in (out, msccl_xml, mscclpp_json, report, heatmap, timeline, stream) if p]
    if written:
        _say(f"  wrote {', '.join(written)}")


def _match_schedule(sched: Any, path: str, collective: str, nbytes: float, chunks: int, root: int) -> None:
    """A schedule brings its collective, size, chunks and root: -c, -s, --chunks and --root given with it must
    say the same (a user who asks for another collective or size is told, not silently given this one's)."""
    wrong = []
    if _given("collective") and collective != sched.collective:
        wrong.append(f"-c {collective} (the schedule's is {sched.collective})")
    if _given("size") and abs(nbytes - sched.bytes) > 1e-9 * max(nbytes, sched.bytes):
        wrong.append(f"-s {nbytes:.0f} bytes (the schedule's is {sched.bytes:.0f})")
    if _given("chunks") and chunks != sched.chunks_per_rank:
        wrong.append(f"--chunks {chunks} (the schedule's is {sched.chunks_per_rank})")
    if _given("root") and root != sched.root:
        wrong.append(f"--root {root} (the schedule's is {sched.root})")
    if wrong:
        raise click.UsageError(
            f"{path} is simulated as it was made; it does not match " + ", ".join(wrong) + ". -c, -s, "
            "--chunks and --root choose a baseline's; leave them out with --schedule"
        )


@click.command()
@_with_topo
@click.option(
    "--schedule", "schedule_path", type=click.Path(exists=True, dir_okay=False), help="schedule JSON"
)
@click.option("--baseline", "-b", "algo", type=click.Choice([*S.BASELINES, "all"]), help="baseline algorithm")
@O.choice(
    "--collective",
    "-c",
    values=S.COLLECTIVES,
    default="allgather",
    help="baseline collective (with --schedule: must be the schedule's, which it brings)",
)
@click.option(
    "--size",
    "-s",
    type=_SIZE,
    default="1G",
    show_default=True,
    help="baseline size (binary units); with --schedule: must be the schedule's",
)
@click.option(
    "--chunks",
    type=click.IntRange(1, _INT_MAX),
    default=1,
    show_default=True,
    help="baseline chunks per NPU (per root for bcast/reduce); with --schedule: must be the schedule's",
)
@click.option(
    "--root",
    type=click.IntRange(0, _INT_MAX),
    default=0,
    show_default=True,
    help="root rank (broadcast, reduce); with --schedule: must be the schedule's",
)
@click.option("--check/--no-check", default=True, show_default=True)
@click.option("--report", type=click.Path(dir_okay=False), help="JSON report to write")
@click.option(
    "--heatmap",
    type=click.Path(dir_okay=False),
    callback=O.picture_path,
    help="link-utilization heat map (format by extension); with -b all one per baseline: NAME.ring.png, ...",
)
@click.option(
    "--timeline",
    type=click.Path(dir_okay=False),
    callback=O.picture_path,
    help="time-line chart (format by extension); with -b all one per baseline: NAME.ring.png, ...",
)
def sim(
    topo: Any,
    schedule_path: str | None,
    algo: str | None,
    collective: str,
    size: int,
    chunks: int,
    root: int,
    check: bool,
    report: str | None,
    heatmap: str | None,
    timeline: str | None,
) -> None:
    """Simulate a schedule or a baseline algorithm on a topology (congestion-aware).

    A schedule file is matched to the topology by the names of its NPUs and links, never by position, and
    refused with a sentence when they do not match. A timed schedule is first checked as written (its own
    times against the model: durations, links, data); the exit status is non-zero when any check fails.
    """
    refuse_unwritable(report, heatmap, timeline)
    if bool(schedule_path) == bool(algo):
        raise click.UsageError("give exactly one of --schedule FILE or --baseline ALGO")
    # -b all writes one picture of each kind per baseline (hm.png -> hm.ring.png): those are the files
    named_outputs: list[tuple[str, str | None]] = (
        [
            (f"{o} ({a})", _named(p, a))
            for a in S.BASELINES
            for o, p in (("--heatmap", heatmap), ("--timeline", timeline))
        ]
        if algo == "all"
        else [("--heatmap", heatmap), ("--timeline", timeline)]
    )
    refuse_same_file(("--schedule", schedule_path), *named_outputs, ("--report", report))
    nbytes = float(size) if algo or _given("size") else 0.0
    items: list[tuple[str, Any]] = []
    try:
        if schedule_path:
            sched = S.load_schedule(schedule_path, topo)
            _match_schedule(sched, schedule_path, collective, nbytes, chunks, root)
            items.append(("schedule", sched))
        else:
            _refuse_moot_root(collective)
            _check_chunk_bytes(nbytes, chunks, topo, collective, "--chunks" if chunks > 1 else "--size")
            algos: tuple[str, ...] = S.BASELINES if algo == "all" else (str(algo),)
            for a in algos:
                try:
                    items.append((a, S.baseline(topo, a, collective, nbytes, chunks=chunks, root=root)))
                except ValueError as e:
                    if algo != "all":
                        raise
                    _say(f"{a}: skipped ({e})")
    except S.ScheduleError as e:
        raise click.ClickException(f"{e}; nothing was simulated") from e
    except ValueError as e:
        raise click.ClickException(str(e)) from e
    except MemoryError as e:
        raise click.ClickException(f"out of memory building the baseline ({e}); give fewer --chunks") from e
    results = []
    failed: list[str] = []
    outputs: list[str] = []
    for name, sched in items:
        entry: dict[str, Any] = {
            "name": name,
            "algorithm": sched.algorithm,
            "collective": sched.collective,
            "bytes": sched.bytes,
        }
        problems: list[str] = []
        hidden = 0  # errors the checker counted beyond those it lists
        if check and sched.timed:
            # The schedule as written: every transfer must last what the model gives its route, and the data,
            # links and reduction order must hold at the schedule's own times.
            written = S.check(sched, topo, exact_durations=True, progress=_progress(f"{name}: checking"))
            claimed = sched.time_us
            tol = 1e-9 * max(abs(claimed), written["end_us"]) + 1e-6
            if abs(claimed - written["end_us"]) > tol:
                problems.append(
                    f"the schedule says it takes {claimed:.6g} us, "
                    f"its last transfer ends at {written['end_us']:.6g} us"
                )
            if written["mistimed"]:
                problems.append(
                    f"{written['mistimed']} transfer(s) mistimed against the model: was the schedule timed "
                    "on another topology? Give sim the -g/-t, --bw and --lat that synth had"
                )
            problems += [e for e in written["errors"] if e not in problems]
            hidden += written["error_count"] - len(written["errors"])
            entry["written_time_us"] = claimed
            entry["written_check_ok"] = not problems
            entry["written_errors"] = written["error_count"] + (
                1 if abs(claimed - written["end_us"]) > tol else 0
            )
        try:
            res = S.simulate(topo, sched)
        except ValueError as e:
            raise click.ClickException(f"{name}: {e}") from e
        entry.update(
            time_us=res["time_us"],
            algbw_gbps=res["algbw_gbps"],
            max_link_util=max(res["link_util"], default=0.0),
        )
        if check:
            c = S.check(res["timed"], topo, progress=_progress(f"{name}: checking the replay"))
            entry["check_ok"] = c["ok"]
            if not c["ok"]:
                problems += [f"replay: {e}" for e in c["errors"]]
                hidden += c["error_count"] - len(c["errors"])
        entry["check_errors"] = problems[:20]
        results.append(entry)
        status = "" if not check else (", check ok" if not problems else ", check FAILED")
        written_part = (
            f" (as written {entry['written_time_us']:.2f} us)" if "written_time_us" in entry else ""
        )
        _say(
            f"{name}: {sched.collective} {res['time_us']:.2f} us{written_part}, "
            f"algbw {res['algbw_gbps']:.2f} GB/s{status}"
        )
        if problems:
            failed.append(name)
            for p in problems[:5]:
                click.echo(f"  {p}", err=True)
            if len(problems) + hidden > 5:
                click.echo(f"  ... and {len(problems) + hidden - 5} more", err=True)
        # -b all: one picture of each kind per baseline, named after it (hm.png -> hm.ring.png)
        many = algo == "all"
        pictures = (_named(heatmap, name), _named(timeline, name)) if many else (heatmap, timeline)
        _plots(topo, res, *pictures, f"{name} {sched.collective} on {topo.name}")
        outputs += [x for x in pictures if x]
    if report:
        Path(report).write_text(
            jsonout.dumps({"topology": topo.name, "npus": topo.num_npus, "results": results}, indent=2) + "\n"
        )
        outputs.append(report)
    if outputs:
        _say(f"  wrote {', '.join(outputs)}")
    if failed:
        raise click.ClickException(f"check failed: {', '.join(failed)}")
