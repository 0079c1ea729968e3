"""`autoccl topo`, `autoccl profile` and `autoccl adaptive check|bench`: the command line of autoccl.adaptive.

Each runs on every rank of a job: under a launcher (torchrun/srun variables set) in the launcher's
processes, else in --nproc local processes started here (gloo on CPUs, NCCL on GPUs). Rank 0 writes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from autoccl import jsonout
from autoccl.cli import options as O
from autoccl.cli.files import refuse_same_file, refuse_unwritable
from autoccl.cli.synth import generated_topology, generator_parameters
from autoccl.synth import MAX_CHUNKS

_NO_TORCH = (
    "PyTorch is not installed, and the adaptive commands run on it: pip install 'autoccl[adaptive]' "
    "(from a clone: pip install '.[adaptive]'), or torch>=2.4; without a GPU, PyTorch's CPU build is enough: "
    "pip install torch --index-url https://download.pytorch.org/whl/cpu"
)


def _need_torch() -> None:
    """Before anything imports autoccl.adaptive's torch-based modules: a sentence, not a traceback."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise click.ClickException(_NO_TORCH) from None


def _writable(*paths: str | None) -> None:
    """Outputs refused before the job runs, not found out after it. Rank 0 writes: under a launcher the
    other ranks do not check (their hosts may lack the folder)."""
    from autoccl.adaptive.launch import launched

    if not launched() or os.environ["RANK"] == "0":
        refuse_unwritable(*paths)


def _device(device: str) -> str:
    _need_torch()
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() and torch.cuda.device_count() > 0 else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise click.ClickException("--device cuda: no CUDA GPU is visible to torch here")
    return device


@dataclass(frozen=True)
class _Topology:
    """A topology given on the command line (--topology or --gen), read, validated and built once: its
    document (what the ranks' jobs build theirs from), its NPUs in rank order, and the name the user gave
    it (the file or the generator spec), for messages."""

    doc: dict[str, Any]
    ranks: list[str]
    source: str


@dataclass(frozen=True)
class _Ranks:
    """The ranks of one command's job, resolved once (by _ranks) before any process starts."""

    world: int  # the job's ranks
    local: int  # the ranks this machine runs, which share its memory
    start: int  # the local processes to start here; 0 under a launcher, whose processes are the job's
    hosts: bool = False  # --hosts-on-one-gpu: every local rank on GPU 0, a host of its own to NCCL


def _ranks(
    nproc: int | None, device: str, least: int, topology: _Topology | None = None, hosts: bool = False
) -> _Ranks:
    """The job's ranks. Under a launcher (torchrun/srun variables set): its WORLD_SIZE and LOCAL_WORLD_SIZE
    (each taken as 1 when not a number). Else the local processes to start: --nproc (checked against the
    GPUs, one rank per GPU), else one per GPU or a few CPU ranks. A topology's rank count is the job's (a
    plan is for its ranks): --nproc or WORLD_SIZE is checked against it. `least`: the fewest ranks the job
    runs on (a collective needs 2). `hosts` (--hosts-on-one-gpu): the ranks share GPU 0, each a host of its
    own, so no count of GPUs limits them; 2 unless --nproc or the topology says otherwise."""
    from autoccl.adaptive.launch import launched

    if topology is not None:
        n = len(topology.ranks)
        if n < least:
            raise click.ClickException(
                f"{topology.source} has {n} rank(s); a collective needs at least {least}"
            )
    if launched():
        if hosts:
            raise click.ClickException(
                "--hosts-on-one-gpu starts its own ranks; under a launcher give each rank a host of its own "
                "there (NCCL_HOSTID, as benchmarks/gpu/hosts_on_one_gpu.sh does)"
            )
        world = os.environ["WORLD_SIZE"]
        if topology is not None and world.isdigit() and int(world) != n:
            raise click.ClickException(
                f"{topology.source} has {n} ranks and the launcher started {world} (WORLD_SIZE): "
                "they must be equal"
            )
        if world.isdigit() and int(world) < least:
            raise click.ClickException(
                f"a collective needs at least {least} ranks; the launcher started {world}"
            )
        local = os.environ.get("LOCAL_WORLD_SIZE", "")
        return _Ranks(
            world=int(world) if world.isdigit() else 1,
            local=int(local) if local.isdigit() and int(local) > 0 else 1,
            start=0,
        )
    import torch

    # one rank per GPU, or (hosts) every rank on GPU 0
    per_gpu = device == "cuda" and not hosts
    gpus = torch.cuda.device_count() if device == "cuda" else 0
    if topology is not None:
        if nproc is not None and nproc != n:
            raise click.BadParameter(
                f"{nproc}, but {topology.source} has {n} ranks: give --nproc {n} or leave it out",
                param_hint="--nproc",
            )
        if per_gpu and n > gpus:
            raise click.ClickException(
                f"{topology.source} has {n} ranks and only {gpus} GPU(s) are visible (one rank per GPU)"
            )
        start = n
    elif nproc is not None:
        if nproc < least:
            raise click.BadParameter(f"must be at least {least}", param_hint="--nproc")
        if per_gpu and nproc > gpus:
            raise click.ClickException(f"--nproc {nproc}: only {gpus} GPU(s) visible (one rank per GPU)")
        start = nproc
    elif hosts:
        start = max(least, 2)
    elif device == "cuda":
        if gpus < least:
            raise click.ClickException(
                f"a collective needs at least {least} ranks and only {gpus} GPU is visible "
                "(one rank per GPU); --device cpu runs CPU ranks"
            )
        start = gpus
    else:
        start = max(2, min(os.cpu_count() or 2, 8))
    return _Ranks(world=start, local=start, start=start, hosts=hosts)


def _size_text(n: float, memory: bool = False) -> str:
    """Bytes in binary units as the command line spells them (100T, 1.5G, 4096), or as memory (100 TiB)."""
    for unit, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            return f"{n / scale:.4g} {unit}iB" if memory else f"{n / scale:.4g}{unit}"
    return f"{n:.0f} B" if memory else f"{n:.0f}"


def _fits(option: str, value: str, need: float, device: str, local_ranks: int, one_gpu: bool = False) -> None:
    """Refuse, before any process starts, what no rank could hold: `need` bytes per rank against one GPU's
    memory (with `one_gpu`, --hosts-on-one-gpu: GPU 0's shared by the local ranks), or on CPUs against this
    machine's memory shared by its ranks (0 where it cannot be read: no check)."""
    from autoccl.synth import physical_memory_gib

    if device == "cuda" and one_gpu:
        import torch

        have = float(torch.cuda.get_device_properties(0).total_memory) / max(local_ranks, 1)
        where = f"a rank's share of GPU 0's memory ({local_ranks} rank(s))"
    elif device == "cuda":
        import torch

        have = float(
            min(torch.cuda.get_device_properties(i).total_memory for i in range(torch.cuda.device_count()))
        )
        where = "one GPU's memory"
    else:
        have = physical_memory_gib() * 2**30 / max(local_ranks, 1)
        where = f"a rank's share of this machine's memory ({local_ranks} rank(s))"
    if have and need > have:
        raise click.BadParameter(
            f"{value}: a rank would need about {_size_text(need, True)}, more than {where}, "
            f"{_size_text(have, True)}",
            param_hint=option,
        )


def run_job(job: Callable[..., Any], cfg: dict[str, Any], device: str, ranks: _Ranks) -> Any | None:
    """Rank 0's result (None on the other ranks of a launched job), on the ranks `_ranks` resolved."""
    from autoccl.adaptive.jobs import init_from_launcher
    from autoccl.adaptive.launch import WorkerError, launched, run_local
    from autoccl.adaptive.nvml import NvmlUnavailable

    try:
        if launched():
            import torch.distributed as dist

            init_from_launcher(device)
            try:
                res = job(dist.get_rank(), dist.get_world_size(), cfg)
                return res if dist.get_rank() == 0 else None
            finally:
                dist.destroy_process_group()
        return run_local(
            job,
            ranks.start,
            cfg,
            backend="nccl" if device == "cuda" else "gloo",
            timeout_s=cfg.get("timeout", 600),
            hosts=ranks.hosts,
        )[0]
    except WorkerError as e:
        raise click.ClickException(str(e).splitlines()[0]) from None
    except NvmlUnavailable as e:
        raise click.ClickException(str(e)) from None


def _write_outputs(
    doc: dict[str, Any], out: str | None, plot: str | None, side: str | None, side_doc: Any
) -> None:
    """The topology (--out), its JSON side file (--reports / --report) and its drawing (--plot), as asked,
    and a line naming what was written (as synth and sim say)."""
    if out:
        _write_doc(doc, out)
    if side:
        Path(side).write_text(jsonout.dumps(side_doc, indent=1) + "\n")
    if plot:
        from autoccl.adaptive.plots import topology_plot

        topology_plot(doc, plot)
    written = [f for f in (out, side, plot) if f]
    if written:
        click.echo(f"wrote {', '.join(written)}", err=True)


def _write_doc(doc: dict[str, Any], path: str) -> None:
    """Validate through the synthesizer, then write YAML (or JSON for *.json)."""
    import yaml

    from autoccl.synth import TopologyFileError, topology_from_dict

    try:
        topology_from_dict(doc, source="the topology written")
    except TopologyFileError as e:
        raise click.ClickException(f"internal: the topology does not validate: {e}") from None
    p = Path(path)
    if p.suffix == ".json":
        text = jsonout.dumps(doc, indent=1)
    else:
        text = yaml.safe_dump(doc, sort_keys=False, width=120)
    p.write_text(text + ("\n" if not text.endswith("\n") else ""))


def _load_doc(path: str) -> _Topology:
    """A topology file, validated by building it (once): its document and NPUs in rank order, whichever way
    the document lists them (npus:, nodes: or generator:)."""
    from autoccl.adaptive.runtime import load_topology_doc
    from autoccl.synth import TopologyFileError, topology_from_dict

    try:
        doc = load_topology_doc(path)
        built = topology_from_dict(doc, source=path)
    except (TopologyFileError, ValueError) as e:
        msg = str(e)  # a binary file's UnicodeDecodeError does not say which file
        raise click.ClickException(
            msg if path in msg else f"{path}: not a readable topology file ({msg})"
        ) from None
    except Exception as e:  # yaml / json syntax
        raise click.ClickException(f"{path}: not a readable topology file ({e})") from None
    return _Topology(doc, [str(r) for r in built.ranks], path)


_INT_MAX = 2**31 - 1  # the synthesizer's counts are C ints


class _Counts(click.ParamType):
    """Element counts, comma-separated, each 0 or more (0: empty tensors, a case of its own)."""

    name = "counts"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> list[int]:
        if isinstance(value, list):
            return value
        try:
            out = [int(s) for s in str(value).split(",")]
        except ValueError:
            self.fail(f"element counts, e.g. 5,37; got {value!r}", param, ctx)
        for n in out:
            if n < 0:
                self.fail(f"element counts are 0 or more, got {n}", param, ctx)
            if n > 2**62:
                self.fail(f"element count {n} is past any tensor's size", param, ctx)
        return out


def _sizes(text: str) -> list[int]:
    """The default sizes (a device's) as --sizes would take them."""
    return list(O.Bytes(many=True).convert(text, None, None))


def _chunks_fit(chunks: int, ranks: int) -> None:
    if chunks * ranks > MAX_CHUNKS:
        raise click.BadParameter(
            f"{chunks} per rank on {ranks} ranks is {chunks * ranks} chunks; the synthesizer takes at most "
            f"{MAX_CHUNKS}",
            param_hint="--chunks",
        )


_device_opt = O.choice(
    "--device",
    values=["auto", "cpu", "cuda"],
    default="auto",
    help="cuda: one rank per GPU over NCCL; cpu: gloo ranks",
)


_hosts_opt = click.option(
    "--hosts-on-one-gpu",
    "hosts",
    is_flag=True,
    help="start every rank on GPU 0 as a host of its own to NCCL (sockets over loopback; 2 ranks unless "
    "--nproc or the topology says): the executor on a machine of one GPU, at no NVLink speed",
)


def _nproc_opt(least: int, default: str) -> Callable[[Any], Any]:
    return click.option(
        "--nproc",
        type=click.IntRange(min=least),
        help=f"local ranks to start when not under a launcher (default: {default})",
    )


_plot_opt = click.option(
    "--plot",
    type=click.Path(dir_okay=False),
    callback=O.picture_path,
    help="picture of the topology (PNG, or another suffix matplotlib writes: .svg, .pdf, ...)",
)


@click.command()
@_device_opt
@_nproc_opt(1, "GPUs, or CPU cores")
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="topology file to write (YAML, or .json)")
@_plot_opt
@click.option("--reports", type=click.Path(dir_okay=False), help="also write the ranks' raw reports (JSON)")
@click.option(
    "--from-reports",
    type=click.Path(exists=True, dir_okay=False),
    help="build from reports written by --reports (no processes started)",
)
@click.option("--name", default="", help="topology name (default: the host name)")
@_hosts_opt
def topo(
    device: str,
    nproc: int | None,
    out: str | None,
    plot: str | None,
    reports: str | None,
    from_reports: str | None,
    name: str,
    hosts: bool,
) -> None:
    """Detect this machine's topology: GPUs, NVLink/NVSwitch/PCIe (NVML) and NICs, or the CPU ranks."""
    if from_reports:  # what says how to start the ranks has nothing to act on
        source = click.get_current_context().get_parameter_source
        moot = [
            option
            for option, given in (
                ("--device", source("device") is not ParameterSource.DEFAULT),
                ("--nproc", nproc is not None),
                ("--hosts-on-one-gpu", hosts),
            )
            if given
        ]
        if moot:
            raise click.UsageError(
                f"--from-reports starts no process: {', '.join(moot)} would change nothing; the reports say "
                "which ranks, devices and hosts there were"
            )
    else:  # building from reports starts no process: no torch needed
        _need_torch()
    refuse_same_file(("--out", out), ("--plot", plot), ("--reports", reports))
    _writable(out, plot, reports)
    from autoccl.adaptive.detect import RankReport, build_topology

    if from_reports:
        try:
            raw = json.loads(Path(from_reports).read_text())
            doc = build_topology([RankReport.from_dict(d) for d in raw], name)
        except (json.JSONDecodeError, TypeError, KeyError, ValueError) as e:
            raise click.ClickException(
                f"{from_reports}: not a reports file written by --reports ({e})"
            ) from None
        res: Any = {"topology": doc, "reports": raw}
    else:
        from autoccl.adaptive.jobs import topo_job

        dev = _device(device)
        res = run_job(topo_job, {"device": dev, "name": name}, dev, _ranks(nproc, dev, 1, hosts=hosts))
        if res is None:
            return
    doc = res["topology"]
    _write_outputs(doc, out, plot, reports, res["reports"])
    click.echo(
        f"{doc['name']}: {len(doc['npus'])} ranks, {len(doc.get('switches', []))} switch(es), "
        f"{len(doc.get('nics', []))} NIC(s), {len(doc['links'])} links"
    )
    click.echo(doc.get("description", ""))
    if len(doc["npus"]) < 2:
        click.echo(
            "autoccl topo: one rank: synth, sim, profile and adaptive need at least 2 (--nproc 2 or more)",
            err=True,
        )
    if not out:
        import yaml

        click.echo(yaml.safe_dump(doc, sort_keys=False, width=120))


@click.command()
@_device_opt
@_nproc_opt(1, "the --topology's ranks, else GPUs or CPU cores")
@click.option(
    "--topology",
    "-t",
    type=click.Path(exists=True, dir_okay=False),
    help="structure to measure (default: detect)",
)
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="measured topology file (YAML, or .json)")
@click.option("--report", type=click.Path(dir_okay=False), help="fits, error bars and contention (JSON)")
@click.option(
    "--sizes",
    type=O.Bytes(many=True),
    default=None,
    help="message sizes, at least two (default CPU 4K,64K,256K,1M; GPU 1M,16M,64M,256M)",
)
@click.option(
    "--repeats",
    type=click.IntRange(min=1),
    default=5,
    show_default=True,
    help="repeats per size (the fastest is kept)",
)
@O.choice(
    "--model",
    values=["auto", "p2p", "switch"],
    default="auto",
    help="links within a host: one per pair, a shared-port switch, or as the contention test says",
)
@click.option("--concurrent/--serial", default=False, show_default=True, help="time disjoint pairs at once")
@click.option(
    "--validate",
    type=O.Bytes(),
    default=None,
    help="also run All-Gather/All-Reduce of this size: measured vs predicted",
)
@_plot_opt
@_hosts_opt
def profile(
    device: str,
    nproc: int | None,
    topology: str | None,
    out: str | None,
    report: str | None,
    sizes: list[int] | None,
    repeats: int,
    model: str,
    concurrent: bool,
    validate: int | None,
    plot: str | None,
    hosts: bool,
) -> None:
    """Measure every link's latency and bandwidth (point-to-point over torch.distributed)."""
    _need_torch()
    refuse_same_file(("--out", out), ("--report", report), ("--plot", plot))
    _writable(out, report, plot)
    from autoccl.adaptive.jobs import profile_job

    dev = _device(device)
    try:
        import scipy  # noqa: F401  (the alpha-beta fits)
    except ImportError:
        raise click.ClickException(
            "autoccl profile needs scipy for its fits: pip install 'autoccl[adaptive]' (or scipy>=1.10)"
        ) from None
    size_list = sizes or _sizes("1M,16M,64M,256M" if dev == "cuda" else "4K,64K,256K,1M")
    if len(set(size_list)) < 2:
        raise click.BadParameter("give at least two different sizes", param_hint="--sizes")
    cfg: dict[str, Any] = {
        "device": dev,
        "sizes": size_list,
        "repeats": repeats,
        "model": model,
        "concurrent": concurrent,
        "validate": validate or 0,
    }
    structure = _load_doc(topology) if topology else None
    if structure is not None:
        # the profile names the ranks as the structure does: npus: in rank order, whichever way it lists them
        structure.doc.setdefault("npus", structure.ranks)
        cfg["structure"] = structure.doc
    ranks = _ranks(nproc, dev, 1, structure, hosts)
    # ping-pong buffers of the largest size; --validate's All-Gather and All-Reduce (input and output)
    _fits("--sizes", _size_text(max(size_list)), 2 * max(size_list), dev, ranks.local, hosts)
    if validate:
        _fits("--validate", _size_text(validate), 2 * validate, dev, ranks.local, hosts)
    cores = os.cpu_count() or 1
    if dev == "cpu" and ranks.local > cores:
        click.echo(
            f"autoccl profile: {ranks.local} ranks on {cores} CPU cores: the ranks wait for each other's "
            "turn on a core, and the fits measure that more than the links (give --nproc at most the cores)",
            err=True,
        )
    res = run_job(profile_job, cfg, dev, ranks)
    if res is None:
        return
    doc = res["topology"]
    _write_outputs(doc, out, plot, report, {k: v for k, v in res.items() if k != "topology"})
    prof = res["profile"]
    click.echo(f"{len(doc['npus'])} ranks, {res['model']} model, measured in {res['seconds']:.1f} s")
    doubtful = 0
    for p in prof["pairs"]:
        if not p.get("fitted", True):
            doubtful += 1
            click.echo(
                f"  {p['src']} -> {p['dst']}: no fit (the times fall or stay flat with size): beta at least "
                f"{p['bandwidth_gbps']:.3f} GB/s (the largest size over its time), alpha taken as 0; "
                "more --repeats or larger --sizes"
            )
            continue
        why = _fit_doubts(p)
        doubtful += bool(why)
        click.echo(
            f"  {p['src']} -> {p['dst']}: alpha {p['latency_us']:.2f} +- {p['latency_err_us']:.2f} us, "
            f"beta {p['bandwidth_gbps']:.3f} +- {p['bandwidth_err_gbps']:.3f} GB/s"
            + (f" (doubtful: {'; '.join(why)})" if why else "")
        )
    if doubtful:
        click.echo(
            f"autoccl profile: {doubtful} of {len(prof['pairs'])} link fits are doubtful and are written as "
            "measured; more --repeats, larger --sizes or fewer ranks than cores give tighter ones",
            err=True,
        )
    if structure is not None:
        dropped = [*structure.doc.get("switches", []), *structure.doc.get("nics", [])]
        if dropped:
            click.echo(
                f"autoccl profile: {topology}'s switches and NICs ({', '.join(map(str, dropped))}) are not "
                f"kept: the measured topology models each host's ranks by the {res['model']} model and joins "
                "hosts through one network switch; ranks are grouped into hosts by their names (HOST/GPU)",
                err=True,
            )
    for c in prof["contention"]:
        click.echo(
            f"  rank {c['rank']}: fan-out {c['out_gbps']:.3f} GB/s, fan-in {c['in_gbps']:.3f} GB/s, "
            f"one pair {c['pair_out_gbps']:.3f} GB/s -> "
            + ("shared port" if c["shared"] else "independent links")
        )
    for v in res.get("validation", []):
        click.echo(
            f"  {v['collective']} {v['bytes']} B: predicted {v['predicted_us']:.1f} us, "
            f"measured {v['measured_us']:.1f} us ({100 * v['error']:+.1f}%)"
        )


def _fit_doubts(pair: dict[str, Any]) -> list[str]:
    """Why a link's fitted alpha and beta are not to be trusted, in words (none: trusted). A fit whose error
    bar passes half its value, or whose intercept came out negative (alpha is then written as 0), was
    written as measured, and the synthesis took it as the link."""
    why = []
    beta, beta_err = pair["bandwidth_gbps"], pair.get("bandwidth_err_gbps")
    alpha, alpha_err = pair["latency_us"], pair.get("latency_err_us")
    if beta_err is not None and math.isfinite(beta_err) and beta_err > beta / 2:
        why.append("beta's error bar is above half its value")
    if alpha == 0:
        why.append("alpha clamped at 0 (the fit's intercept was negative)")
    elif alpha_err is not None and math.isfinite(alpha_err) and alpha_err > alpha / 2:
        why.append("alpha's error bar is above half its value")
    return why


@click.group()
def adaptive() -> None:
    """Synthesized collectives executed over torch.distributed (docs/adaptive.md)."""


def _given_topology(
    topology: str | None,
    gen: str | None,
    bandwidth: float | None = None,
    latency: float | None = None,
    gen_opt: tuple[str, ...] = (),
) -> _Topology | None:
    """--topology FILE or --gen SPEC (with --bw, --lat, --gen-opt, as synth takes them), built once; None: the
    job's ranks detect this machine's."""
    if topology and gen:
        raise click.UsageError("give at most one of --topology and --gen")
    if not gen and (bandwidth is not None or latency is not None or gen_opt):
        raise click.UsageError("--bw, --lat and --gen-opt are parameters of --gen's generator")
    if topology:
        return _load_doc(topology)
    if gen:
        from autoccl.adaptive.jobs import topology_doc

        built = generated_topology(gen, bandwidth, latency, gen_opt)
        return _Topology(topology_doc(built), [str(r) for r in built.ranks], gen)
    return None


_COLLS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def _once(items: list[Any], option: str) -> None:
    """A list option naming an item twice would run its cases twice: refused, naming the item."""
    twice = sorted({str(x) for x in items if items.count(x) > 1})
    if twice:
        raise click.BadParameter(f"names {', '.join(twice)} more than once", param_hint=option)


def _colls(text: str) -> list[str]:
    out = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in out if c not in _COLLS]
    if bad or not out:
        raise click.BadParameter(f"collectives are {', '.join(_COLLS)}", param_hint="--colls")
    _once(out, "--colls")
    return out


@adaptive.command()
@_device_opt
@_nproc_opt(2, "the --topology's ranks, else GPUs or CPU cores; at least 2")
@click.option(
    "--topology", "-t", type=click.Path(exists=True, dir_okay=False), help="topology to synthesize on"
)
@click.option("--gen", "-g", help="or a generated one, e.g. torus:2x2 (default: this machine, detected)")
@generator_parameters
@click.option("--colls", default=",".join(_COLLS), show_default=True)
@click.option("--dtypes", default=None, help="comma-separated (default: every dtype)")
@click.option("--all-ops", is_flag=True, help="every reduction, not only SUM")
@click.option(
    "--sizes",
    type=_Counts(),
    default="5,37",
    show_default=True,
    help="element counts, 0 or more (ragged on purpose: rank r gets count + r)",
)
@click.option(
    "--chunks",
    type=click.IntRange(0, _INT_MAX),
    default=2,
    show_default=True,
    help="chunks per rank in the synthesized plans (0: chosen by trial)",
)
@_hosts_opt
def check(
    device: str,
    nproc: int | None,
    topology: str | None,
    gen: str | None,
    bandwidth: float | None,
    latency: float | None,
    gen_opt: tuple[str, ...],
    colls: str,
    dtypes: str | None,
    all_ops: bool,
    sizes: list[int],
    chunks: int,
    hosts: bool,
) -> None:
    """Run every collective x dtype x size from synthesized plans and compare with the reference."""
    _need_torch()
    from autoccl.adaptive.jobs import check_job
    from autoccl.adaptive.verify import dtype_by_name

    dev = _device(device)
    coll_list = _colls(colls)
    itemsize = 16  # complex128, the widest of every dtype
    _once(sizes, "--sizes")
    if dtypes:
        itemsize = 1
        _once(dtypes.split(","), "--dtypes")
        for name in dtypes.split(","):
            try:
                itemsize = max(itemsize, dtype_by_name(name).itemsize)
            except ValueError as e:  # before any process starts
                raise click.BadParameter(str(e), param_hint="--dtypes") from None
    given = _given_topology(topology, gen, bandwidth, latency, gen_opt)
    ranks = _ranks(nproc, dev, 2, given, hosts)  # without a topology, the ranks that will detect one
    _chunks_fit(chunks, ranks.world)
    # a rank's inputs, outputs and reference of the largest count: a gather's output holds every rank's
    if sizes:
        need = 4 * ranks.world * (max(sizes) + ranks.world) * itemsize
        _fits("--sizes", str(max(sizes)), need, dev, ranks.local, hosts)
    cfg = {
        "device": dev,
        "topology": given.doc if given else None,  # None: the ranks detect it
        "colls": coll_list,
        "dtypes": dtypes.split(",") if dtypes else None,
        "ops": None if all_ops else ["sum"],
        "sizes": sizes,
        "chunks": chunks,
        "bytes": 1 << 20,
    }
    res = run_job(check_job, cfg, dev, ranks)
    if res is None:
        return
    click.echo(f"{res['cases']} cases on rank 0, {len(res['failures'])} failure(s)")
    for f in res["failures"][:20]:
        click.echo(f"  {f}")
    if res["failures"]:
        raise click.ClickException("the executor's results differ from the reference")


@adaptive.command()
@_device_opt
@_nproc_opt(2, "the --topology's ranks, else GPUs or CPU cores; at least 2")
@click.option(
    "--topology", "-t", type=click.Path(exists=True, dir_okay=False), help="topology (e.g. from profile)"
)
@click.option("--gen", "-g", help="or a generated one, e.g. switch:2 (default: this machine, detected)")
@generator_parameters
@click.option("--colls", default="allgather,allreduce", show_default=True, help="collectives to run")
@click.option(
    "--sizes",
    type=O.Bytes(many=True),
    default=None,
    help="bytes per collective (default CPU 256K,1M; GPU 64M,256M,1G)",
)
@click.option(
    "--chunks",
    type=click.IntRange(0, _INT_MAX),
    default=1,
    show_default=True,
    help="chunks per rank in the synthesized plans (0: chosen by trial)",
)
@click.option(
    "--seeds",
    type=click.IntRange(1, _INT_MAX),
    default=4,
    show_default=True,
    help="synthesis seeds (the best plan is run)",
)
@click.option(
    "--warmup", type=click.IntRange(min=0), default=3, show_default=True, help="untimed runs before timing"
)
@click.option(
    "--iters",
    type=click.IntRange(min=1),
    default=10,
    show_default=True,
    help="timed runs (the median is kept)",
)
@click.option(
    "--copy",
    "copy_size",
    type=O.Bytes(),
    default=None,
    help="also time plain CUDA peer copies of this size (GPUs only)",
)
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="results (JSON)")
@_hosts_opt
def bench(
    device: str,
    nproc: int | None,
    topology: str | None,
    gen: str | None,
    bandwidth: float | None,
    latency: float | None,
    gen_opt: tuple[str, ...],
    colls: str,
    sizes: list[int] | None,
    chunks: int,
    seeds: int,
    warmup: int,
    iters: int,
    copy_size: int | None,
    out: str | None,
    hosts: bool,
) -> None:
    """Executed plans against the backend's own collectives (busbw), with a correctness check. Per line:
    each one's busbw, their ratio, whether the plan's result is the backend's, and the plan's median time
    with the host's part of it (issuing the work: on a GPU, near the whole means the host sets the pace);
    then both again with the calls issued back to back, as nccl-tests times a collective."""
    _need_torch()
    _writable(out)
    from autoccl.adaptive.jobs import bench_job

    dev = _device(device)
    if copy_size and dev != "cuda":
        click.echo("autoccl: --copy times CUDA peer copies; with --device cpu it does nothing", err=True)
    size_list = sizes or _sizes("64M,256M,1G" if dev == "cuda" else "256K,1M")
    given = _given_topology(topology, gen, bandwidth, latency, gen_opt)
    cfg: dict[str, Any] = {
        "device": dev,
        "topology": given.doc if given else None,  # None: the ranks detect it
        "colls": _colls(colls),
        "sizes": size_list,
        "chunks": chunks,
        "seeds": seeds,
        "warmup": warmup,
        "iters": iters,
        "copy": copy_size or 0,
    }
    ranks = _ranks(nproc, dev, 2, given, hosts)
    _chunks_fit(chunks, ranks.world)
    # a collective's input and output of the largest size
    _fits("--sizes", _size_text(max(size_list)), 2 * max(size_list), dev, ranks.local, hosts)
    if copy_size and dev == "cuda":
        _fits("--copy", _size_text(copy_size), 2 * copy_size, dev, 1)
    res = run_job(bench_job, cfg, dev, ranks)
    if res is None:
        return
    for c in res.get("copy", []):
        click.echo(f"copy cuda:{c['src']} -> cuda:{c['dst']}: {c['gbps']:.1f} GB/s ({c['bytes']} B)")
    for r in res["rows"]:
        nat = f"{r['native_busbw_gbps']:.2f}" if r["native_us"] else "n/a"
        nat_loop = f"{r['native_loop_busbw_gbps']:.2f}" if r["native_loop_us"] else "n/a"
        click.echo(
            f"{r['collective']:>13} {r['bytes']:>11} B: plan {r['plan_busbw_gbps']:.2f} GB/s busbw, "
            f"native {nat}, plan/native {r['ratio'] or 0:.2f}, same result: {r['same_as_native']}; "
            f"plan {r['plan_us']:.0f} us, host {r['plan_host_us']:.0f} us of it to issue; "
            f"back to back: plan {r['plan_loop_busbw_gbps']:.2f}, native {nat_loop}, "
            f"plan/native {r['loop_ratio'] or 0:.2f}"
        )
    if out:
        Path(out).write_text(jsonout.dumps(res, indent=1) + "\n")
