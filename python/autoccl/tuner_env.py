"""The environment that loads the autoccl plugin into stock NCCL (shared by `autoccl env|run` and the
benchmark harness, so every launcher sets exactly the same variables)."""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Mapping

from autoccl._paths import plugin_path

MODES = ("off", "observe", "fixed", "table", "online", "manual")
# Modes whose ranks agree through a coordinator: online, and table under the step guard (AUTOCCL_GUARD on).
COORDINATED_MODES = ("online", "table")

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
# The coordinator `autoccl run` gives its job: used by the library only where neither the user
# (AUTOCCL_COORD_ADDR) nor the launcher (torchrun, srun) names one, so the hosts of a multi-host job still
# meet at the launcher's coordinator, and each `autoccl run` has its own otherwise.
RUN_VARS = ("AUTOCCL_RUN_ADDR", "AUTOCCL_RUN_TOKEN")
# Launchers that start ranks on other hosts from this one and do not derive a coordinator themselves.
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun", "mpiexec.hydra")


# Ports the coordinator is given: below Linux's ephemeral range (32768-60999 by default). A port the kernel
# handed out as ephemeral and we released can be handed out again to the job's own sockets before the
# coordinator binds it (NCCL's bootstrap opens several): then no process can serve the coordinator, and every
# rank's first collective failed with "coordinator unreachable" (1 of 18 mpirun launches, 2 x H100).
_COORD_PORTS = range(20000, 32000)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on `host` that is free right now, drawn at random outside the ephemeral range, so that the
    job's own sockets do not take it before the coordinator binds it."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    rng = secrets.SystemRandom()
    for _ in range(64):
        port = rng.choice(_COORD_PORTS)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(family, socket.SOCK_STREAM) as s:  # a crowded range: any free port
        s.bind((host, 0))
        return int(s.getsockname()[1])


def free_local_port() -> int:
    return free_port("127.0.0.1")


def this_host_address() -> str | None:
    """The address other hosts reach this one at (the interface of the default route; no packet is
    sent), or None on a host without a network."""
    for probe in (("10.254.254.254", 1), ("192.0.2.1", 1)):
        try:
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.connect(probe)
                ip = str(s.getsockname()[0])
        except OSError:
            continue
        if not ip.startswith("127.") and ip != "0.0.0.0":
            return ip
    return None


def run_coordinator_env(host: str = "127.0.0.1") -> dict[str, str]:
    """AUTOCCL_RUN_ADDR (a free port on `host`) and a fresh AUTOCCL_RUN_TOKEN: one job's own coordinator."""
    where = f"[{host}]" if ":" in host else host
    return {"AUTOCCL_RUN_ADDR": f"{where}:{free_port(host)}", "AUTOCCL_RUN_TOKEN": secrets.token_hex(16)}


def mpi_forwarding(env: Mapping[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """Open MPI hands remote ranks only the variables it is told to (-x): name ours in
    OMPI_MCA_mca_base_env_list (MPICH's and Intel MPI's mpiexec pass the whole environment anyway)."""
    names = [k for k in env if k != "OMPI_MCA_mca_base_env_list"]
    current = base.get("OMPI_MCA_mca_base_env_list", "")
    listed = set(current.split(";")) if current else set()
    extra = [n for n in names if n not in listed]
    return {"OMPI_MCA_mca_base_env_list": ";".join([x for x in (current,) if x] + extra)}


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
    run_host: str | None = "127.0.0.1",
) -> dict[str, str]:
    """Variables to add to a command's environment to run it under the plugin in `mode`. In modes online
    and table (whose step guard decides through the coordinator) with `run_host`, the job's own coordinator
    there (AUTOCCL_RUN_ADDR/TOKEN): what the library uses where no launcher names one (None: none, as
    `autoccl env` prints, since jobs started from one shell must not share it)."""
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
    if mode in COORDINATED_MODES and run_host:
        env.update(run_coordinator_env(run_host))
    if extra:
        env.update(extra)
    return env


def plain_nccl_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without any of our settings, plus the safety variables."""
    src = dict(os.environ if base is None else base)
    clean = {k: v for k, v in src.items() if not k.startswith(OWN_PREFIXES) and k not in PLUGIN_VARS}
    clean.update(SAFETY_ENV)
    return clean
