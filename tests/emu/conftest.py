"""Fixtures for the emulator tests: binaries from AUTOCCL_LIB_DIR or the installed package."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from autoccl._paths import ArtefactNotFound, emulator_path, plugin_path
from autoccl.emu.runner import test_plugin_path


def _built_or_skip(find: Callable[[], Path], what: str) -> Path:
    try:
        return find()
    except ArtefactNotFound as e:
        pytest.skip(f"{what} not built: {e}")


@pytest.fixture(scope="session")
def emulator() -> Path:
    return _built_or_skip(emulator_path, "autoccl-emu")


@pytest.fixture(scope="session")
def testplugin(emulator: Path) -> Path:
    return _built_or_skip(test_plugin_path, "emulator test plugin")


@pytest.fixture(scope="session")
def plugin(emulator: Path) -> Path:
    return _built_or_skip(plugin_path, "libautoccl-nccl.so")
