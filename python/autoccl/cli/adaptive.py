"""`autoccl topo`, `autoccl profile` and `autoccl adaptive check|bench`: the command line of autoccl.adaptive.

Each runs on every rank of a job: under a launcher (torchrun/srun variables set) in the launcher's
processes, else in --nproc local processes started here (gloo on CPUs, NCCL on GPUs). Rank 0 writes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from autoccl.cli import options as O
from autoccl.cli import refuse_unwritable
from autoccl.synth import parse_size

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
    from autoccl.adaptive.jobs import launched

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


def _nproc(nproc: int | None, device: str) -> int:
    import torch

    if nproc is not None:
        if nproc < 1:
            raise click.BadParameter("must be at least 1", param_hint="--nproc")
        if device == "cuda" and nproc > torch.cuda.device_count():
            raise click.ClickException(
                f"--nproc {nproc}: only {torch.cuda.device_count()} GPU(s) visible (one rank per GPU)"
            )
        return nproc
    if device == "cuda":
        return torch.cuda.device_count()
    return max(2, min(os.cpu_count() or 2, 8))


def run_job(job: Callable[..., Any], cfg: dict[str, Any], device: str, nproc: int | None) -> Any | None:
    """Rank 0's result (None on the other ranks of a launched job)."""
    from autoccl.adaptive.jobs import init_from_launcher, launched
    from autoccl.adaptive.launch import WorkerError, run_local
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
        n = _nproc(nproc, device)
        return run_local(
            job, n, cfg, backend="nccl" if device == "cuda" else "gloo", timeout_s=cfg.get("timeout", 600)
        )[0]
    except WorkerError as e:
        raise click.ClickException(str(e).splitlines()[0]) from None
    except NvmlUnavailable as e:
        raise click.ClickException(str(e)) from None


def _write_outputs(
    doc: dict[str, Any], out: str | None, plot: str | None, side: str | None, side_doc: Any
) -> None:
    """The topology (--out), its JSON side file (--reports / --report) and its drawing (--plot), as asked."""
    if out:
        _write_doc(doc, out)
    if side:
        Path(side).write_text(json.dumps(side_doc, indent=1) + "\n")
    if plot:
        from autoccl.adaptive.plots import topology_plot

        topology_plot(doc, plot)


def _write_doc(doc: dict[str, Any], path: str) -> None:
    """Validate through the synthesizer, then write YAML (or JSON for *.json)."""
    import yaml

    from autoccl.synth import TopologyFileError, topology_from_dict

    try:
        topology_from_dict(doc, source="the topology written")
    except TopologyFileError as e:
        raise click.ClickException(f"internal: the topology does not validate: {e}") from None
    p = Path(path)
    text = (
        json.dumps(doc, indent=1) if p.suffix == ".json" else yaml.safe_dump(doc, sort_keys=False, width=120)
    )
    p.write_text(text + ("\n" if not text.endswith("\n") else ""))


def _load_doc(path: str) -> dict[str, Any]:
    from autoccl.adaptive.runtime import load_topology_doc
    from autoccl.synth import TopologyFileError, topology_from_dict

    try:
        doc = load_topology_doc(path)
        topology_from_dict(doc, source=path)
    except (TopologyFileError, ValueError) as e:
        msg = str(e)  # a binary file's UnicodeDecodeError does not say which file
        raise click.ClickException(
            msg if path in msg else f"{path}: not a readable topology file ({msg})"
        ) from None
    except Exception as e:  # yaml / json syntax
        raise click.ClickException(f"{path}: not a readable topology file ({e})") from None
    return doc


def _sizes(text: str) -> list[int]:
    try:
        return [int(parse_size(s)) for s in text.split(",") if s.strip()]
    except ValueError as e:
        raise click.BadParameter(str(e), param_hint="--sizes") from None


_device_opt = O.choice(
    "--device",
    values=["auto", "cpu", "cuda"],
    default="auto",
    help="cuda: one rank per GPU over NCCL; cpu: gloo ranks",
)
_nproc_opt = click.option(
    "--nproc", type=int, help="local ranks to start when not under a launcher (default: GPUs, or CPU cores)"
)


@click.command()
@_device_opt
@_nproc_opt
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="topology file to write (YAML, or .json)")
@click.option("--plot", type=click.Path(dir_okay=False), help="picture of the topology (PNG)")
@click.option("--reports", type=click.Path(dir_okay=False), help="also write the ranks' raw reports (JSON)")
@click.option(
    "--from-reports",
    type=click.Path(exists=True, dir_okay=False),
    help="build from reports written by --reports (no processes started)",
)
@click.option("--name", default="", help="topology name (default: the host name)")
def topo(
    device: str,
    nproc: int | None,
    out: str | None,
    plot: str | None,
    reports: str | None,
    from_reports: str | None,
    name: str,
) -> None:
    """Detect this machine's topology: GPUs, NVLink/NVSwitch/PCIe (NVML) and NICs, or the CPU ranks."""
    _need_torch()
    _writable(out, plot, reports)
    from autoccl.adaptive.detect import RankReport, build_topology
    from autoccl.adaptive.jobs import topo_job

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
        res = run_job(topo_job, {"device": _device(device), "name": name}, _device(device), nproc)
        if res is None:
            return
    doc = res["topology"]
    _write_outputs(doc, out, plot, reports, res["reports"])
    click.echo(
        f"{doc['name']}: {len(doc['npus'])} ranks, {len(doc.get('switches', []))} switch(es), "
        f"{len(doc.get('nics', []))} NIC(s), {len(doc['links'])} links"
    )
    click.echo(doc.get("description", ""))
    if not out:
        import yaml

        click.echo(yaml.safe_dump(doc, sort_keys=False, width=120))


@click.command()
@_device_opt
@_nproc_opt
@click.option(
    "--topology",
    "-t",
    type=click.Path(exists=True, dir_okay=False),
    help="structure to measure (default: detect)",
)
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="measured topology file (YAML, or .json)")
@click.option("--report", type=click.Path(dir_okay=False), help="fits, error bars and contention (JSON)")
@click.option("--sizes", default=None, help="message sizes (default CPU 4K,64K,256K,1M; GPU 1M,16M,64M,256M)")
@click.option(
    "--repeats", type=int, default=5, show_default=True, help="repeats per size (the fastest is kept)"
)
@O.choice(
    "--model",
    values=["auto", "p2p", "switch"],
    default="auto",
    help="links within a host: one per pair, a shared-port switch, or as the contention test says",
)
@click.option("--concurrent/--serial", default=False, show_default=True, help="time disjoint pairs at once")
@click.option(
    "--validate", default=None, help="also run All-Gather/All-Reduce of this size: measured vs predicted"
)
@click.option("--plot", type=click.Path(dir_okay=False), help="picture of the measured topology (PNG)")
def profile(
    device: str,
    nproc: int | None,
    topology: str | None,
    out: str | None,
    report: str | None,
    sizes: str | None,
    repeats: int,
    model: str,
    concurrent: bool,
    validate: str | None,
    plot: str | None,
) -> None:
    """Measure every link's latency and bandwidth (point-to-point over torch.distributed)."""
    _need_torch()
    _writable(out, report, plot)
    from autoccl.adaptive.jobs import profile_job

    dev = _device(device)
    try:
        import scipy  # noqa: F401  (the alpha-beta fits)
    except ImportError:
        raise click.ClickException(
            "autoccl profile needs scipy for its fits: pip install 'autoccl[adaptive]' (or scipy>=1.10)"
        ) from None
    if repeats < 1:
        raise click.BadParameter("must be at least 1", param_hint="--repeats")
    size_list = _sizes(sizes or ("1M,16M,64M,256M" if dev == "cuda" else "4K,64K,256K,1M"))
    if len(set(size_list)) < 2:
        raise click.BadParameter("give at least two different sizes", param_hint="--sizes")
    cfg: dict[str, Any] = {
        "device": dev,
        "sizes": size_list,
        "repeats": repeats,
        "model": model,
        "concurrent": concurrent,
        "validate": int(parse_size(validate)) if validate else 0,
    }
    if topology:
        cfg["structure"] = _load_doc(topology)
        nproc = nproc if nproc is not None else len(cfg["structure"]["npus"])
    res = run_job(profile_job, cfg, dev, nproc)
    if res is None:
        return
    doc = res["topology"]
    _write_outputs(doc, out, plot, report, {k: v for k, v in res.items() if k != "topology"})
    prof = res["profile"]
    click.echo(f"{len(doc['npus'])} ranks, {res['model']} model, measured in {res['seconds']:.1f} s")
    for p in prof["pairs"]:
        click.echo(
            f"  {p['src']} -> {p['dst']}: alpha {p['latency_us']:.2f} +- {p['latency_err_us']:.2f} us, "
            f"beta {p['bandwidth_gbps']:.3f} +- {p['bandwidth_err_gbps']:.3f} GB/s"
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


@click.group()
def adaptive() -> None:
    """Synthesized collectives executed over torch.distributed (docs/adaptive.md)."""


def _topology_cfg(topology: str | None, gen: str | None) -> dict[str, Any] | None:
    if topology and gen:
        raise click.UsageError("give at most one of --topology and --gen")
    if topology:
        return _load_doc(topology)
    if gen:
        from autoccl.adaptive.jobs import generated_doc
        from autoccl.synth import TopologyFileError

        try:
            return generated_doc(gen)
        except (TopologyFileError, ValueError) as e:
            raise click.ClickException(str(e)) from None
    return None


_COLLS = ("allgather", "reducescatter", "allreduce", "broadcast", "reduce")


def _colls(text: str) -> list[str]:
    out = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in out if c not in _COLLS]
    if bad or not out:
        raise click.BadParameter(f"collectives are {', '.join(_COLLS)}", param_hint="--colls")
    return out


@adaptive.command()
@_device_opt
@_nproc_opt
@click.option(
    "--topology", "-t", type=click.Path(exists=True, dir_okay=False), help="topology to synthesize on"
)
@click.option("--gen", "-g", help="or a generated one, e.g. torus:2x2 (default: this machine, detected)")
@click.option("--colls", default=",".join(_COLLS), show_default=True)
@click.option("--dtypes", default=None, help="comma-separated (default: every dtype)")
@click.option("--all-ops", is_flag=True, help="every reduction, not only SUM")
@click.option("--sizes", default="5,37", show_default=True, help="element counts (ragged on purpose)")
@click.option("--chunks", type=int, default=2, show_default=True)
def check(
    device: str,
    nproc: int | None,
    topology: str | None,
    gen: str | None,
    colls: str,
    dtypes: str | None,
    all_ops: bool,
    sizes: str,
    chunks: int,
) -> None:
    """Run every collective x dtype x size from synthesized plans and compare with the reference."""
    _need_torch()
    from autoccl.adaptive.jobs import check_job, topo_job
    from autoccl.adaptive.verify import dtype_by_name

    dev = _device(device)
    for name in dtypes.split(",") if dtypes else ():
        try:
            dtype_by_name(name)
        except ValueError as e:  # before any process starts
            raise click.BadParameter(str(e), param_hint="--dtypes") from None
    doc = _topology_cfg(topology, gen)
    if doc is None:
        res = run_job(topo_job, {"device": dev}, dev, nproc)
        if res is None:
            return
        doc = res["topology"]
    n_npus = sum(1 for x in doc.get("nodes", []) if x.get("kind", "npu") == "npu") + len(doc.get("npus", []))
    try:
        size_list = [int(s) for s in sizes.split(",")]
    except ValueError:
        raise click.BadParameter("element counts, e.g. 5,37", param_hint="--sizes") from None
    cfg = {
        "device": dev,
        "topology": doc,
        "colls": _colls(colls),
        "dtypes": dtypes.split(",") if dtypes else None,
        "ops": None if all_ops else ["sum"],
        "sizes": size_list,
        "chunks": chunks,
        "bytes": 1 << 20,
    }
    res = run_job(check_job, cfg, dev, nproc if nproc is not None else n_npus)
    if res is None:
        return
    click.echo(f"{res['cases']} cases on rank 0, {len(res['failures'])} failure(s)")
    for f in res["failures"][:20]:
        click.echo(f"  {f}")
    if res["failures"]:
        raise click.ClickException("the executor's results differ from the reference")


@adaptive.command()
@_device_opt
@_nproc_opt
@click.option(
    "--topology", "-t", type=click.Path(exists=True, dir_okay=False), help="topology (e.g. from profile)"
)
@click.option("--colls", default="allgather,allreduce", show_default=True, help="collectives to run")
@click.option("--sizes", default=None, help="bytes per collective (default CPU 256K,1M; GPU 64M,256M,1G)")
@click.option(
    "--chunks", type=int, default=1, show_default=True, help="chunks per rank in the synthesized plans"
)
@click.option(
    "--seeds", type=int, default=4, show_default=True, help="synthesis seeds (the best plan is run)"
)
@click.option("--warmup", type=int, default=3, show_default=True, help="untimed runs before timing")
@click.option("--iters", type=int, default=10, show_default=True, help="timed runs (the median is kept)")
@click.option("--copy", "copy_size", default=None, help="also time plain CUDA peer copies of this size")
@click.option("--out", "-o", type=click.Path(dir_okay=False), help="results (JSON)")
def bench(
    device: str,
    nproc: int | None,
    topology: str | None,
    colls: str,
    sizes: str | None,
    chunks: int,
    seeds: int,
    warmup: int,
    iters: int,
    copy_size: str | None,
    out: str | None,
) -> None:
    """Executed plans against the backend's own collectives (busbw), with a correctness check. Per line:
    each one's busbw, their ratio, whether the plan's result is the backend's, and the plan's median time
    with the host's part of it (issuing the work: on a GPU, near the whole means the host sets the pace);
    then both again with the calls issued back to back, as nccl-tests times a collective."""
    _need_torch()
    _writable(out)
    from autoccl.adaptive.jobs import bench_job

    dev = _device(device)
    cfg: dict[str, Any] = {
        "device": dev,
        "topology": _load_doc(topology) if topology else None,
        "colls": _colls(colls),
        "sizes": _sizes(sizes or ("64M,256M,1G" if dev == "cuda" else "256K,1M")),
        "chunks": chunks,
        "seeds": seeds,
        "warmup": warmup,
        "iters": iters,
        "copy": int(parse_size(copy_size)) if copy_size else 0,
    }
    if cfg["topology"] is not None and nproc is None:
        nproc = len(cfg["topology"]["npus"]) if "npus" in cfg["topology"] else None
    res = run_job(bench_job, cfg, dev, nproc)
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
        Path(out).write_text(json.dumps(res, indent=1) + "\n")
