"""What NVML says about this host's GPUs and their links (NVLink, NVSwitch, PCIe), through nvidia-ml-py
(`pip install 'autoccl[adaptive]'`). Never parses nvidia-smi output.

`read_gpus(module)` takes the pynvml module (or any object with the same functions: the tests pass a fake)
and returns plain records that the topology builder (autoccl.adaptive.detect) turns into links.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from types import ModuleType
from typing import Any

# Per-link, per-direction NVLink bandwidth (GB/s) by NVML version code: NVLink 1 20, 2-4 25, 5 50, 6 100.
NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 25.0, 6: 25.0, 7: 50.0, 8: 100.0}
# PCIe per-lane bandwidth by generation (GB/s, after line encoding).
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used here (nvidia-ml-py missing, no driver, no GPU)."""


@dataclass
class NvLink:
    link: int
    version: int  # NVML_NVLINK_VERSION_* code
    remote_bus_id: str
    remote_type: str  # gpu | switch | other

    @property
    def gbps(self) -> float:
        return NVLINK_GBPS.get(self.version, 25.0)


@dataclass
class GpuInfo:
    index: int
    name: str
    uuid: str
    bus_id: str
    pcie_gen: int
    pcie_width: int
    nvlinks: list[NvLink] = field(default_factory=list)

    @property
    def pcie_gbps(self) -> float:
        return PCIE_LANE_GBPS.get(self.pcie_gen, 0.985) * max(self.pcie_width, 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_dict(d: dict[str, Any]) -> GpuInfo:
        links = [NvLink(**x) for x in d.get("nvlinks", [])]
        return GpuInfo(**{**d, "nvlinks": links})


def normalize_bus_id(bus_id: str | bytes) -> str:
    """'00000000:18:00.0' and '0000:18:00.0' -> '0000:18:00.0' (lower case, 4-digit domain)."""
    s = bus_id.decode() if isinstance(bus_id, bytes) else str(bus_id)
    s = s.strip().lower()
    parts = s.split(":")
    if len(parts) == 3:
        try:
            return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
        except ValueError:
            return s
    return s


def load_pynvml() -> ModuleType:
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable(
            "nvidia-ml-py is not installed: pip install 'autoccl[adaptive]' (or nvidia-ml-py) "
            "to detect GPU links"
        ) from e
    return pynvml


def read_gpus(nv: Any) -> list[GpuInfo]:
    """Every GPU NVML sees on this host, with its active NVLinks and PCIe link."""
    try:
        nv.nvmlInit()
    except Exception as e:
        raise NvmlUnavailable(f"NVML could not start (no NVIDIA driver or GPU here?): {e}") from e
    try:
        gpus: list[GpuInfo] = []
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            name = nv.nvmlDeviceGetName(h)
            uuid = nv.nvmlDeviceGetUUID(h)
            bus = normalize_bus_id(nv.nvmlDeviceGetPciInfo(h).busId)
            gen = _try_int(nv, "nvmlDeviceGetCurrPcieLinkGeneration", h) or _try_int(
                nv, "nvmlDeviceGetMaxPcieLinkGeneration", h
            )
            width = _try_int(nv, "nvmlDeviceGetCurrPcieLinkWidth", h) or _try_int(
                nv, "nvmlDeviceGetMaxPcieLinkWidth", h
            )
            gpus.append(
                GpuInfo(
                    i,
                    name.decode() if isinstance(name, bytes) else str(name),
                    uuid.decode() if isinstance(uuid, bytes) else str(uuid),
                    bus,
                    gen,
                    width,
                    _nvlinks(nv, h),
                )
            )
        known = {g.bus_id for g in gpus}
        for g in gpus:  # NVML may not report the remote type: a GPU's bus id says it
            for link in g.nvlinks:
                if link.remote_type == "other" and link.remote_bus_id in known:
                    link.remote_type = "gpu"
        return gpus
    finally:
        try:
            nv.nvmlShutdown()
        except Exception:
            pass


def _try_int(nv: Any, fn: str, h: Any) -> int:
    f = getattr(nv, fn, None)
    if f is None:
        return 0
    try:
        return int(f(h))
    except Exception:
        return 0


def _nvlinks(nv: Any, h: Any) -> list[NvLink]:
    out: list[NvLink] = []
    max_links = int(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18))
    types = {
        getattr(nv, "NVML_NVLINK_DEVICE_TYPE_GPU", 0): "gpu",
        getattr(nv, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2): "switch",
    }
    for link in range(max_links):
        try:
            active = nv.nvmlDeviceGetNvLinkState(h, link)
        except Exception:  # NVML_ERROR_NOT_SUPPORTED / INVALID_ARGUMENT past the last link
            continue
        if not active:
            continue
        try:
            version = int(nv.nvmlDeviceGetNvLinkVersion(h, link))
        except Exception:
            version = 0
        try:
            remote = normalize_bus_id(nv.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
        except Exception:
            remote = ""
        try:
            kind = types.get(int(nv.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)), "other")
        except Exception:
            kind = "other"
        out.append(NvLink(link, version, remote, kind))
    return out
