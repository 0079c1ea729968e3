"""The NCCL emulator: the real plugin library on a simulated cluster (CPU only).

`autoccl-emu` (C++) loads the plugin like NCCL does and plays scenarios; this package builds the
scenarios, runs the emulator (ranks as threads or as processes), and collects its ground truth and the
plugin's trace. See docs/emulator.md.
"""

from autoccl.emu.runner import (
    ProcResult,
    RunResult,
    coord_env,
    default_model,
    find_divergences,
    run,
    test_plugin_path,
)
from autoccl.emu.scenario import Call, Comm, Group, Host, Scenario, simple

__all__ = [
    "Call",
    "Comm",
    "Group",
    "Host",
    "ProcResult",
    "RunResult",
    "Scenario",
    "coord_env",
    "default_model",
    "find_divergences",
    "run",
    "simple",
    "test_plugin_path",
]
