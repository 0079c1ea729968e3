"""The loader of the compiled module `autoccl._synth`.

A module of its own so that the package's submodules (topofile) can import it at the top without importing the
package that imports them (the cycle autoccl.synth <-> autoccl.synth.topofile).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

_EXT: ModuleType | None = None


class ExtensionNotFound(ImportError):
    """The compiled module is neither installed nor built (the CLI says so in one line)."""


def _candidates() -> list[Path]:
    found: list[Path] = []
    for var in ("AUTOCCL_SYNTH_LIB_DIR", "AUTOCCL_LIB_DIR"):
        d = os.environ.get(var)
        if d:
            found.extend(sorted(Path(d).glob("_synth*.so")))
    repo = Path(__file__).resolve().parents[3]
    found.extend(sorted(repo.glob("build/*/lib/_synth*.so")))
    return found


def ext() -> ModuleType:
    """The compiled module: `autoccl._synth` from a wheel, else a development build (AUTOCCL_LIB_DIR)."""
    global _EXT
    if _EXT is not None:
        return _EXT
    try:
        from autoccl import _synth  # type: ignore[attr-defined]

        _EXT = _synth
        return _synth
    except ImportError:
        pass
    for path in _candidates():
        spec = importlib.util.spec_from_file_location("autoccl._synth", path)
        if spec is None or spec.loader is None:
            continue
        mod = importlib.util.module_from_spec(spec)
        sys.modules["autoccl._synth"] = mod
        spec.loader.exec_module(mod)
        _EXT = mod
        return mod
    raise ExtensionNotFound(
        "autoccl._synth not found: install autoccl (`pip install .`) or build it "
        "(cmake --build <dir> --target _synth) and set AUTOCCL_LIB_DIR=<dir>/lib"
    )
