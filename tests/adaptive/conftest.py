"""The adaptive tests need the compiled synthesizer (autoccl._synth) and torch; skip cleanly without."""

from __future__ import annotations


import pytest

pytest.importorskip("torch")


@pytest.fixture(scope="session")
def S():
    from autoccl import synth

    try:
        synth.ext()
    except ImportError as e:
        pytest.skip(str(e))
    return synth


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "AUTOCCL_TOPO_HOST"):
        monkeypatch.delenv(var, raising=False)
