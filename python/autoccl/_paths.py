"""Locate the compiled artefacts shipped inside the package (or found in a development build tree)."""

from __future__ import annotations

import os
from pathlib import Path

_PKG_DIR = Path(__file__).resolve().parent
PLUGIN_NAME = "libautoccl-nccl.so"
EMULATOR_NAME = "autoccl-emu"


class ArtefactNotFound(RuntimeError):
    pass


def _candidates(name: str) -> list[Path]:
    found: list[Path] = []
    override = os.environ.get("AUTOCCL_LIB_DIR")
    if override:  # absolute: the emulator and plugin paths are handed to processes run in other directories
        found.append(Path(override).resolve() / name)
    found.append(_PKG_DIR / "lib" / name)
    return found


def find_artefact(name: str) -> Path:
    """Absolute path of `name`: under AUTOCCL_LIB_DIR where that is set (never another copy in its
    place: a build directory that lacks it is an error), else inside the package."""
    override = os.environ.get("AUTOCCL_LIB_DIR", "").strip()
    if override:
        path = Path(override).resolve() / name
        if path.is_file():
            return path
        raise ArtefactNotFound(
            f"{name} not found in AUTOCCL_LIB_DIR={override} ({path}); "
            "build it there or unset AUTOCCL_LIB_DIR"
        )
    for path in _candidates(name):
        if path.is_file():
            return path
    tried = ", ".join(str(p) for p in _candidates(name))
    raise ArtefactNotFound(
        f"{name} not found (tried {tried}); reinstall autoccl with `pip install .` "
        "or point AUTOCCL_LIB_DIR at a build directory"
    )


def plugin_path() -> Path:
    """Absolute path of the NCCL tuner+profiler plugin library."""
    return find_artefact(PLUGIN_NAME)


def emulator_path() -> Path:
    return find_artefact(EMULATOR_NAME)
