"""Fixtures shared by the CLI tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def fake_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A plugin path for env/run tests that must not depend on the C++ build."""
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(lib))
    return lib / "libautoccl-nccl.so"
