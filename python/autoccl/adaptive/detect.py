"""`autoccl topo`: the synthesizer's topology file (docs/synth.md) of the machine the job runs on.

Every rank reports its host, its device and (on GPU hosts) what NVML says about the host's GPUs; the
reports are gathered over the job's process group, and one topology is built from them:

* NPUs are the ranks, in rank order (plan rank = process-group rank), named `<host>/gpu<nvml index>` or
  `<host>/cpu<local rank>`;
* GPUs joined by NVLink get a direct link per direction (links x per-link bandwidth of the NVLink version);
  GPUs whose NVLinks end at NVSwitches are joined through one switch node per host `<host>/nvswitch`;
  GPUs of a host with no NVLink path between them meet at `<host>/pcie` (PCIe generation x width);
* CPU ranks of a host (gloo over loopback) meet at `<host>/loopback`, a shared-port switch;
* with several hosts, each host has a NIC node `<host>/nic` (the host's NICs' aggregate rate, from sysfs)
  on one `network` switch; each rank reaches its host's NIC over PCIe (GPUs) or the loopback port (CPUs).

Bandwidths and latencies here are nominal (data sheets); `autoccl profile` replaces them with measured
values. Ranks of the same host must be contiguous for the two-level `dims` to be written.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoccl.adaptive.nvml import GpuInfo, NvmlUnavailable, load_pynvml, read_gpus

# Nominal latencies (us): what the synthesizer assumes until the links are profiled.
NVLINK_LATENCY_US = 1.0
PCIE_LATENCY_US = 2.0
LOOPBACK_LATENCY_US = 20.0
LOOPBACK_GBPS = 5.0
NIC_LATENCY_US = 5.0
DEFAULT_NIC_GBPS = 1.25  # 10 Gb/s when no NIC rate can be read


@dataclass
class RankReport:
    rank: int
    host: str
    local_rank: int
    device: str  # "cuda" or "cpu"
    gpu_uuid: str = ""
    gpus: list[GpuInfo] = field(default_factory=list)  # every GPU of the host (cuda only)
    nic_gbps: float = 0.0  # aggregate NIC rate of the host (0: unknown)
    nics: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d["gpus"] = [g.to_dict() for g in self.gpus]
        return d

    @staticmethod
    def from_dict(d: dict[str, Any]) -> RankReport:
        return RankReport(**{**d, "gpus": [GpuInfo.from_dict(g) for g in d.get("gpus", [])]})


def host_name() -> str:
    """This host's name; AUTOCCL_TOPO_HOST overrides it (to describe a host as another, or in tests)."""
    return os.environ.get("AUTOCCL_TOPO_HOST") or socket.gethostname()


def nic_rates(sys_root: str = "/sys") -> tuple[list[str], float]:
    """Physical NICs and their aggregate rate in GB/s, from sysfs: InfiniBand ports' `rate` when present,
    else Ethernet `speed` (Mb/s) of interfaces backed by a device."""
    root = Path(sys_root)
    names: list[str] = []
    total = 0.0
    ib = root / "class" / "infiniband"
    if ib.is_dir():
        for dev in sorted(ib.iterdir()):
            for port in sorted((dev / "ports").glob("*")):
                try:
                    state = (port / "state").read_text()
                    rate = (port / "rate").read_text().split()[0]  # "400 Gb/sec (4X NDR)"
                except (OSError, IndexError):
                    continue
                if "ACTIVE" in state:
                    names.append(f"{dev.name}:{port.name}")
                    total += float(rate) / 8
    if names:
        return names, total
    net = root / "class" / "net"
    if net.is_dir():
        for iface in sorted(net.iterdir()):
            if not (iface / "device").exists():  # lo, bridges, veth: no device
                continue
            try:
                mbps = float((iface / "speed").read_text())
            except (OSError, ValueError):
                continue
            if mbps > 0:
                names.append(iface.name)
                total += mbps / 8000
    return names, total


def local_report(rank: int, local_rank: int, device: str, nvml: Any | None = None) -> RankReport:
    """This rank's report. device "cuda" reads NVML (nvml: a pynvml-like module; default the real one)."""
    nics, gbps = nic_rates()
    rep = RankReport(rank, host_name(), local_rank, device, nic_gbps=gbps, nics=nics)
    if device == "cuda":
        import torch

        gpus = read_gpus(nvml if nvml is not None else load_pynvml())
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        uuid = str(getattr(props, "uuid", ""))
        rep.gpus = gpus
        rep.gpu_uuid = _match_uuid(uuid, gpus, torch.cuda.current_device())
    return rep


def _match_uuid(torch_uuid: str, gpus: list[GpuInfo], fallback_index: int) -> str:
    want = torch_uuid.lower().removeprefix("gpu-")
    for g in gpus:
        if g.uuid.lower().removeprefix("gpu-") == want:
            return g.uuid
    if 0 <= fallback_index < len(gpus):
        return gpus[fallback_index].uuid
    raise NvmlUnavailable(f"the rank's CUDA device {torch_uuid} is not among the GPUs NVML lists")


def gather_reports(device: str, group: Any = None, nvml: Any | None = None) -> list[RankReport]:
    """Every rank's report, on every rank (a collective over the process group)."""
    import torch.distributed as dist

    rank = dist.get_rank(group)
    local = int(os.environ.get("LOCAL_RANK", "-1"))
    mine = local_report(rank, local, device, nvml)
    out: list[Any] = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, mine.to_dict(), group=group)
    reports = [RankReport.from_dict(d) for d in out]
    hosts: dict[str, int] = {}
    for r in reports:  # local ranks when the launcher did not say
        if r.local_rank < 0:
            r.local_rank = hosts.get(r.host, 0)
        hosts[r.host] = hosts.get(r.host, 0) + 1
    return reports


class TopologyBuilder:
    def __init__(self, name: str) -> None:
        self.name = name
        self.npus: list[str] = []
        self.switches: list[str] = []
        self.nics: list[str] = []
        self.links: dict[tuple[str, str], tuple[float, float]] = {}
        self.notes: list[str] = []

    def link(self, a: str, b: str, latency_us: float, gbps: float) -> None:
        """Both directions; parallel links add their bandwidth."""
        for s, d in ((a, b), (b, a)):
            old = self.links.get((s, d))
            self.links[(s, d)] = (latency_us, gbps + (old[1] if old else 0.0))

    def document(self, dims: list[int] | None) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "description": "; ".join(self.notes),
            "npus": self.npus,
        }
        if self.switches:
            doc["switches"] = self.switches
        if self.nics:
            doc["nics"] = self.nics
        doc["links"] = [
            {"src": s, "dst": d, "latency_us": round(lat, 4), "bandwidth_gbps": round(bw, 4)}
            for (s, d), (lat, bw) in self.links.items()
        ]
        if dims:
            doc["dims"] = dims
        return doc


def build_topology(reports: list[RankReport], name: str = "") -> dict[str, Any]:
    """The topology document of the ranks described by `reports` (one per rank, in rank order)."""
    if not reports:
        raise ValueError("no rank reports")
    reports = sorted(reports, key=lambda r: r.rank)
    hosts: list[str] = []
    for r in reports:
        if r.host not in hosts:
            hosts.append(r.host)
    b = TopologyBuilder(name or (f"{hosts[0]}" if len(hosts) == 1 else f"{len(hosts)}-hosts"))
    npu_of: dict[int, str] = {}
    for r in reports:
        if r.device == "cuda":
            gpu = next((g for g in r.gpus if g.uuid == r.gpu_uuid), None)
            if gpu is None:
                raise ValueError(f"rank {r.rank}: its GPU {r.gpu_uuid!r} is not in its host's NVML list")
            n = f"{r.host}/gpu{gpu.index}"
        else:
            n = f"{r.host}/cpu{r.local_rank}"
        if n in npu_of.values():
            raise ValueError(f"rank {r.rank} runs on {n}, as another rank does: one rank per device")
        npu_of[r.rank] = n
        b.npus.append(n)
    for host in hosts:
        ranks = [r for r in reports if r.host == host]
        if any(r.device == "cuda" for r in ranks):
            _gpu_host(b, host, ranks, npu_of)
        else:
            b.switches.append(f"{host}/loopback")
            for r in ranks:
                b.link(npu_of[r.rank], f"{host}/loopback", LOOPBACK_LATENCY_US / 2, LOOPBACK_GBPS)
            b.notes.append(
                f"{host}: {len(ranks)} CPU ranks (gloo over loopback, nominal {LOOPBACK_GBPS} GB/s)"
            )
    if len(hosts) > 1:
        b.switches.append("network")
        for host in hosts:
            ranks = [r for r in reports if r.host == host]
            gbps = ranks[0].nic_gbps or DEFAULT_NIC_GBPS
            nic = f"{host}/nic"
            b.nics.append(nic)
            b.link(nic, "network", NIC_LATENCY_US / 2, gbps)
            for r in ranks:
                if r.device == "cuda":
                    gpu = next(g for g in r.gpus if g.uuid == r.gpu_uuid)
                    b.link(npu_of[r.rank], nic, PCIE_LATENCY_US / 2, gpu.pcie_gbps)
                else:
                    b.link(npu_of[r.rank], nic, LOOPBACK_LATENCY_US / 2, LOOPBACK_GBPS)
            what = ", ".join(ranks[0].nics) if ranks[0].nics else "rate unknown, 10 Gb/s assumed"
            b.notes.append(f"{host}: NIC {gbps:g} GB/s ({what})")
    b.notes.append("nominal bandwidths and latencies: run `autoccl profile` for measured ones")
    return b.document(_dims(reports, hosts))


def _gpu_host(b: TopologyBuilder, host: str, ranks: list[RankReport], npu_of: dict[int, str]) -> None:
    gpus = {g.bus_id: g for g in ranks[0].gpus}
    mine = {r.gpu_uuid: r for r in ranks}
    by_bus = {g.bus_id: mine[g.uuid] for g in gpus.values() if g.uuid in mine}
    switched: list[RankReport] = []
    direct: set[frozenset[int]] = set()
    for g in gpus.values():
        r = mine.get(g.uuid)
        if r is None:
            continue
        counts: dict[str, int] = {}
        to_switch = 0
        for link in g.nvlinks:
            if link.remote_type == "switch":
                to_switch += 1
            elif link.remote_type == "gpu" and link.remote_bus_id in by_bus:
                counts[link.remote_bus_id] = counts.get(link.remote_bus_id, 0) + 1
        per = g.nvlinks[0].gbps if g.nvlinks else 0.0
        for bus, k in counts.items():
            peer = by_bus[bus]
            if r.rank < peer.rank:  # one side adds both directions
                b.link(npu_of[r.rank], npu_of[peer.rank], NVLINK_LATENCY_US, k * per)
                direct.add(frozenset((r.rank, peer.rank)))
        if to_switch:
            switched.append(r)
            if f"{host}/nvswitch" not in b.switches:
                b.switches.append(f"{host}/nvswitch")
            b.link(npu_of[r.rank], f"{host}/nvswitch", NVLINK_LATENCY_US / 2, to_switch * per)
            b.notes.append(
                f"{npu_of[r.rank]}: {g.name}, NV{to_switch} to NVSwitch ({to_switch * per:g} GB/s)"
            )
    for pair in direct:
        lo, hi = sorted(pair)
        gbps = b.links[(npu_of[lo], npu_of[hi])][1]
        b.notes.append(f"{npu_of[lo]} <-> {npu_of[hi]}: NVLink {gbps:g} GB/s")
    # PCIe where two ranks of the host have no NVLink path
    sw = {r.rank for r in switched}
    lonely = [
        r
        for r in ranks
        if any(
            frozenset((r.rank, q.rank)) not in direct and not (r.rank in sw and q.rank in sw)
            for q in ranks
            if q.rank != r.rank
        )
    ]
    if lonely:
        b.switches.append(f"{host}/pcie")
        for r in lonely:
            g = next(x for x in gpus.values() if x.uuid == r.gpu_uuid)
            b.link(npu_of[r.rank], f"{host}/pcie", PCIE_LATENCY_US / 2, g.pcie_gbps)
            b.notes.append(f"{npu_of[r.rank]}: PCIe gen{g.pcie_gen} x{g.pcie_width} ({g.pcie_gbps:.1f} GB/s)")


def _dims(reports: list[RankReport], hosts: list[str]) -> list[int] | None:
    if len(hosts) < 2:
        return None
    per = [sum(1 for r in reports if r.host == h) for h in hosts]
    contiguous = all(reports[i].host == hosts[i // per[0]] for i in range(len(reports)))
    if len(set(per)) == 1 and contiguous:
        return [per[0], len(hosts)]
    return None
