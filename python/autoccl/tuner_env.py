"""The environment that loads the autoccl plugin into stock NCCL (shared by `autoccl env|run` and the
benchmark harness, so every launcher sets exactly the same variables)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from autoccl._paths import plugin_path

MODES = ("off", "observe", "fixed", "table", "online")

# Kept set in every launch: NVLink multicast can take a shared host down (shared/data/h200x4/README.md).
SAFETY_ENV = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}

# Variables of ours; cleared from a child's environment before a mode's own values are applied, so that
# a benchmark's `nccl` mode really runs plain NCCL.
OWN_PREFIXES = ("AUTOCCL_",)
PLUGIN_VARS = ("NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN")


def plugin_env(
    mode: str = "table",
    *,
    fixed: str | None = None,
    table: str | None = None,
    cache_dir: str | None = None,
    trace: str | None = None,
    max_channels: int | None = None,
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
    if extra:
        env.update(extra)
    return env


def plain_nccl_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without any of our settings, plus the safety variables."""
    src = dict(os.environ if base is None else base)
    clean = {k: v for k, v in src.items() if not k.startswith(OWN_PREFIXES) and k not in PLUGIN_VARS}
    clean.update(SAFETY_ENV)
    return clean
