"""Every fenced `autoccl synth` / `autoccl sim` command of docs/synth.md runs, in order, in one directory, and
succeeds; the YAML block that starts with `# file: NAME` is written to NAME first."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

DOC = Path(__file__).resolve().parents[2] / "docs" / "synth.md"
FENCE = re.compile(r"^```([a-z]*)\n(.*?)^```", re.S | re.M)


def _files_and_commands() -> tuple[dict[str, str], list[str]]:
    files: dict[str, str] = {}
    commands: list[str] = []
    for lang, body in FENCE.findall(DOC.read_text()):
        first = body.split("\n", 1)[0]
        m = re.match(r"#\s*file:\s*(\S+)", first)
        if lang in ("yaml", "json") and m:
            files[m.group(1)] = body
            continue
        if lang not in ("", "sh", "bash", "console"):
            continue
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith(("autoccl synth ", "autoccl sim ")):
                commands.append(line)
    return files, commands


def test_the_doc_has_commands() -> None:
    files, commands = _files_and_commands()
    assert "topo.yaml" in files
    assert any(c.startswith("autoccl synth") for c in commands)
    assert any(c.startswith("autoccl sim") for c in commands)


def test_every_command_runs(S: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("matplotlib")
    from autoccl.cli import main

    files, commands = _files_and_commands()
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    for cmd in commands:
        res = runner.invoke(main, shlex.split(cmd)[1:])
        assert res.exit_code == 0, f"{cmd}\n{res.output}"
        assert "Traceback" not in res.output, cmd
