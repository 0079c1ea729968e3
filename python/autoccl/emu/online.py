"""Is mode `online` (AUTOCCL_MODE=online) implemented by the plugin library at hand?

Asked by running the library in the emulator on a tiny scenario: the library either makes online
decisions (trace records with "source":"online") or says why not (one WARN line). Nothing is guessed
from version numbers or file names.
"""

from __future__ import annotations

import functools
import os
import tempfile
from pathlib import Path

from autoccl._paths import plugin_path
from autoccl.emu.runner import run
from autoccl.emu.scenario import simple


def online_unavailable(plugin: str | os.PathLike[str] = "default") -> str | None:
    """None when `plugin` implements mode online; otherwise the reason (the library's own words if any)."""
    path = str(plugin_path() if plugin == "default" else Path(plugin))
    return _probe(path)


@functools.lru_cache(maxsize=8)
def _probe(path: str) -> str | None:
    with tempfile.TemporaryDirectory(prefix="autoccl-probe-") as work:
        res = run(
            simple(nranks=2, repeat=4, colls={"allreduce": [1 << 20]}),
            plugin=path,
            env={"AUTOCCL_MODE": "online", "AUTOCCL_HW": "NVIDIA H200x4"},
            workdir=work,
            timeout=60.0,
        )
    online = [t for t in res.trace if t.get("ev") == "call" and t.get("source") == "online"]
    if res.returncode == 0 and online:
        return None
    warns = [ln.split("NCCL WARN", 1)[-1].strip() for ln in res.warn_lines()]
    if warns:
        return warns[0]
    if res.returncode != 0:
        return f"the emulator failed with exit code {res.returncode}: {res.stderr.strip()[-500:]}"
    return "the library made no online decisions (no trace record with source=online)"
