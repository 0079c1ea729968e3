"""The adaptive tests need the compiled synthesizer (autoccl._synth) and torch; skip cleanly without."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")


def pytest_configure(config: pytest.Config) -> None:
    # DDP's first construction imports torch._dynamo (seconds per process): once, in the fork server
    from autoccl.adaptive import launch

    if "torch._dynamo" not in launch.PRELOAD:
        launch.PRELOAD.append("torch._dynamo")


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("WORLD_SIZE", "RANK", "LOCAL_RANK", "AUTOCCL_TOPO_HOST"):
        monkeypatch.delenv(var, raising=False)
