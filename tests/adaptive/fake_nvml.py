"""A stand-in for the pynvml module: the functions autoccl.adaptive.nvml calls, answering from a
description of GPUs and their NVLinks, with NVML's error behaviour (a link index past the last raises)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


@dataclass
class FakeGpu:
    bus: str  # NVML style: 00000000:18:00.0
    links: list[tuple[str, int]] = field(default_factory=list)  # (remote bus, remote type) per active link
    version: int = 6  # NVML_NVLINK_VERSION_4_0
    gen: int = 5
    width: int = 16
    name: str = "NVIDIA H100 80GB HBM3"
    inactive: int = 0  # links NVML lists as inactive after the active ones


class FakeNvml:
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_DEVICE_TYPE_GPU = 0
    NVML_NVLINK_DEVICE_TYPE_IBMNPU = 1
    NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 255

    def __init__(self, gpus: list[FakeGpu], fail_init: bool = False, no_remote_type: bool = False) -> None:
        self.gpus = gpus
        self.fail_init = fail_init
        self.no_remote_type = no_remote_type
        self.initialized = 0

    def nvmlInit(self) -> None:
        if self.fail_init:
            raise NVMLError("Driver Not Loaded")
        self.initialized += 1

    def nvmlShutdown(self) -> None:
        self.initialized -= 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return self.gpus[h].name.encode()

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return f"GPU-{h:08d}-fake"

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self.gpus[h].bus.encode())

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h: int) -> int:
        return self.gpus[h].gen

    def nvmlDeviceGetCurrPcieLinkWidth(self, h: int) -> int:
        return self.gpus[h].width

    def _link(self, h: int, link: int) -> tuple[str, int] | None:
        g = self.gpus[h]
        if link >= len(g.links) + g.inactive or link >= self.NVML_NVLINK_MAX_LINKS:
            raise NVMLError("Not Supported")
        return g.links[link] if link < len(g.links) else None

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        return 1 if self._link(h, link) else 0

    def nvmlDeviceGetNvLinkVersion(self, h: int, link: int) -> int:
        self._link(h, link)
        return self.gpus[h].version

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        remote = self._link(h, link)
        assert remote is not None
        return SimpleNamespace(busId=remote[0].encode())

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, h: int, link: int) -> int:
        if self.no_remote_type:
            raise NVMLError("Function Not Found")
        remote = self._link(h, link)
        assert remote is not None
        return remote[1]


GPU, SWITCH = FakeNvml.NVML_NVLINK_DEVICE_TYPE_GPU, FakeNvml.NVML_NVLINK_DEVICE_TYPE_SWITCH


def hgx_slice(n: int = 2, links: int = 18) -> FakeNvml:
    """n H100s of an HGX board, each with `links` NVLinks to the NVSwitches (what a 2-GPU VM sees)."""
    gpus = []
    for i in range(n):
        sw = [(f"00000000:{0xA0 + k % 4:02X}:00.0", SWITCH) for k in range(links)]
        gpus.append(FakeGpu(f"00000000:{0x18 + 0x20 * i:02X}:00.0", sw))
    return FakeNvml(gpus)


def cube_mesh() -> FakeNvml:
    """Four V100s, NVLink 2: 0-1 x2, 0-2 x1, 1-3 x1, 2-3 x2; 0-3 and 1-2 only over PCIe."""
    bus = [f"00000000:{b:02X}:00.0" for b in (0x1A, 0x1C, 0x88, 0x8A)]
    pairs = {(0, 1): 2, (0, 2): 1, (1, 3): 1, (2, 3): 2}
    gpus = []
    for i in range(4):
        links: list[tuple[str, int]] = []
        for (a, b), k in pairs.items():
            if i in (a, b):
                other = b if i == a else a
                links += [(bus[other], GPU)] * k
        gpus.append(
            FakeGpu(bus[i], links, version=2, gen=3, width=16, name="Tesla V100-SXM2-16GB", inactive=2)
        )
    return FakeNvml(gpus)


def pcie_only(n: int = 2) -> FakeNvml:
    return FakeNvml(
        [FakeGpu(f"00000000:{0x3B + i:02X}:00.0", [], gen=4, width=16, name="L40S") for i in range(n)]
    )
