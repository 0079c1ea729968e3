"""What a result was measured on: hardware, driver, CUDA, NCCL, PyTorch (torch imported lazily)."""

from __future__ import annotations

import os
import platform
import re
import socket
import subprocess
import sys
from typing import Any


def driver_version() -> str | None:
    try:
        with open("/proc/driver/nvidia/version") as f:
            m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", f.read())
            if m:
                return m.group(1)
    except OSError:
        pass
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=False,
        )
        line = out.stdout.strip().splitlines()
        return line[0].strip() if line else None
    except (OSError, subprocess.SubprocessError):
        return None


def host_info(device: str = "cpu") -> dict[str, Any]:
    info: dict[str, Any] = {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": sys.version.split()[0],
    }
    try:
        import torch
    except ImportError:
        info["torch"] = None
        return info
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    info["nccl"] = None
    if torch.cuda.is_available():
        try:
            info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # builds without NCCL
            info["nccl"] = None
    if device == "cuda" and torch.cuda.is_available():
        n = torch.cuda.device_count()
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(n)]
        props = torch.cuda.get_device_properties(0)
        info["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        info["driver"] = driver_version()
    else:
        info["gpus"] = []
        info["driver"] = None
    return info
