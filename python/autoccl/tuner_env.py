"""The environment that loads the autoccl plugin into stock NCCL (shared by `autoccl env|run` and the
benchmark harness, so every launcher sets exactly the same variables)."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping

from autoccl._paths import plugin_path

MODES = ("off", "observe", "fixed", "table", "online")

# Kept set in every launch: NVLink multicast can take a shared host down.
SAFETY_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# Variables of ours; cleared from a child's environment before a mode's own values are applied, so that
# a benchmark's `nccl` mode really runs plain NCCL.
OWN_PREFIXES = ("AUTOCCL_",)
PLUGIN_VARS = ("NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN")


COORD_VARS = ("AUTOCCL_COORD_ADDR", "AUTOCCL_COORD_TOKEN")


# Ports the coordinator is given: below Linux's ephemeral range (32768-60999 by default). A port the kernel
# handed out as ephemeral and we released can be handed out again to the job's own sockets before the
# coordinator binds it (NCCL's bootstrap opens several): then no process can serve the coordinator, and every
# rank's first collective failed with "coordinator unreachable" (1 of 18 mpirun launches, 2 x H100).
_COORD_PORTS = range(20000, 32000)


def free_local_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for the single-host online coordinator), drawn at
    random outside the ephemeral range, so that the job's own sockets do not take it before it is bound."""
    rng = secrets.SystemRandom()
    for _ in range(64):
        port = rng.choice(_COORD_PORTS)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # a crowded range: any free port
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def coord_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """Coordinator settings for mode online when the caller has none: 127.0.0.1:<free port> (every rank
    process on this host connects; one of them serves) and a random token. Multi-host jobs need an address
    every host reaches: set AUTOCCL_COORD_ADDR yourself, or run under torchrun (MASTER_ADDR, MASTER_PORT+17).
    """
    src = os.environ if base is None else base
    out: dict[str, str] = {}
    if not src.get("AUTOCCL_COORD_ADDR") and not (src.get("MASTER_ADDR") and src.get("MASTER_PORT")):
        out["AUTOCCL_COORD_ADDR"] = f"127.0.0.1:{free_local_port()}"
    if not src.get("AUTOCCL_COORD_TOKEN"):
        out["AUTOCCL_COORD_TOKEN"] = secrets.token_hex(16)
    return out


def plugin_env(
    mode: str = "online",
    *,
    fixed: str | None = None,
    table: str | None = None,
    cache_dir: str | None = None,
    trace: str | None = None,
    max_channels: int | None = None,
    nccl_channels: int | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Variables to add to a command's environment to run it under the plugin in `mode`."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
    if mode == "fixed" and not fixed:
        raise ValueError("fixed mode needs rules (e.g. 'allreduce@1M-64M:ring/ll128/16')")
    lib = str(plugin_path())
    env = dict(SAFETY_ENV)
    env.update({"NCCL_TUNER_PLUGIN": lib, "NCCL_PROFILER_PLUGIN": lib, "AUTOCCL_MODE": mode})
    if fixed:
        env["AUTOCCL_FIXED"] = fixed
    if table:
        env["AUTOCCL_TABLE"] = table
    if cache_dir:
        env["AUTOCCL_CACHE_DIR"] = cache_dir
    if trace:
        env["AUTOCCL_TRACE"] = trace
    if max_channels is not None:
        env["AUTOCCL_MAX_CHANNELS"] = str(max_channels)
    if nccl_channels is not None:
        env["AUTOCCL_NCCL_CHANNELS"] = str(nccl_channels)
    if mode == "online":
        env.update(coord_env({**os.environ, **(extra or {})}))
    if extra:
        env.update(extra)
    return env


def plain_nccl_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without any of our settings, plus the safety variables."""
    src = dict(os.environ if base is None else base)
    clean = {k: v for k, v in src.items() if not k.startswith(OWN_PREFIXES) and k not in PLUGIN_VARS}
    clean.update(SAFETY_ENV)
    return clean
