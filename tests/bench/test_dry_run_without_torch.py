"""`bench coll --dry-run` plans and estimates without starting a worker: it needs no PyTorch."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoccl.cli import main


def test_a_dry_run_needs_no_torch(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    args = ["bench", "coll", "--colls", "ag,rs,ar", "--sizes", "1M:1G:x2", "--modes", "nccl", "--dry-run"]
    r = CliRunner().invoke(main, [*args, "--est-busbw", "150", "--est-startup", "25"])
    assert r.exit_code == 0, r.output
    assert "PyTorch" not in r.output
    assert "1 launch(es) of 8 process(es)" in r.output and "estimated duration" in r.output
    # a real run still says what it needs
    r = CliRunner().invoke(
        main, ["bench", "coll", "--sizes", "1M", "--no-progress", "-o", str(tmp_path / "r")]
    )
    assert r.exit_code == 1 and "autoccl bench needs PyTorch" in r.output, r.output
