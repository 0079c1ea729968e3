"""Fixtures for the emulator tests: binaries from AUTOCCL_LIB_DIR or the installed package."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoccl._paths import ArtefactNotFound, emulator_path, plugin_path
from autoccl.emu.runner import test_plugin_path


@pytest.fixture(scope="session")
def emulator() -> Path:
    try:
        return emulator_path()
    except ArtefactNotFound as e:
        pytest.skip(f"autoccl-emu not built: {e}")


@pytest.fixture(scope="session")
def testplugin(emulator: Path) -> Path:
    try:
        return test_plugin_path()
    except ArtefactNotFound as e:
        pytest.skip(f"emulator test plugin not built: {e}")


@pytest.fixture(scope="session")
def plugin(emulator: Path) -> Path:
    try:
        return plugin_path()
    except ArtefactNotFound as e:
        pytest.skip(f"libautoccl-nccl.so not built: {e}")
