"""Every `autoccl` command in a fenced block of README.md and docs/ (docs/synth.md has its own suite)
runs as written, or is marked as needing GPUs (its line's comment starts with `GPU`). The README's
`python3 -m pip install . && autoccl demo` runs its `autoccl` part: the install is scripts/test.sh's first
step. Commands run in a scratch directory with a scratch cache."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import autoccl

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "synth.md")]


@dataclass(frozen=True)
class DocCommand:
    where: str
    command: str  # the `autoccl ...` part
    gpu: bool


def doc_commands() -> list[DocCommand]:
    out: list[DocCommand] = []
    for doc in DOCS:
        text = doc.read_text()
        for block in re.finditer(r"```[^\n]*\n(.*?)```", text, re.S):
            lines = block.group(1).splitlines()
            first = text[: block.start()].count("\n") + 2
            i = 0
            while i < len(lines):
                start, line = i, lines[i]
                while line.split("#", 1)[0].rstrip().endswith("\\") and i + 1 < len(lines):
                    i += 1
                    line = line.split("#", 1)[0].rstrip()[:-1] + " " + lines[i].strip()
                i += 1
                if line.lstrip().startswith("#"):
                    continue
                code, _, comment = line.partition("  #")
                m = re.search(r"(?:^|&&|\$\()\s*(autoccl\s[^)]*)", code)
                if not m:
                    continue
                gpu = comment.strip().startswith("GPU")
                out.append(DocCommand(f"{doc.name}:{first + start}", m.group(1).strip().rstrip('"'), gpu))
    return out


COMMANDS = doc_commands()
# each distinct command once (the README's `autoccl demo` is docs/demo.md's too)
RUNNABLE = list({c.command: c for c in reversed(COMMANDS) if not c.gpu}.values())[::-1]


def test_the_docs_have_commands() -> None:
    assert len(COMMANDS) >= 10
    assert len(RUNNABLE) >= 6
    for c in COMMANDS:
        assert "..." not in c.command or c.gpu, (
            f"{c.where}: an elided command must be marked GPU-only: {c.command}"
        )


@pytest.mark.parametrize("doc", RUNNABLE, ids=[f"{c.where} {c.command[:40]}" for c in RUNNABLE])
def test_doc_command_runs(doc: DocCommand, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AUTOCCL_") or k == "AUTOCCL_LIB_DIR"}
    env.update({"XDG_CACHE_HOME": str(tmp_path / "xdg"), "OMP_NUM_THREADS": "1"})
    # The autoccl this test process imports (installed, or the checkout's python/ with AUTOCCL_LIB_DIR; never
    # the checkout's python/ in place of an installed package: it has no compiled library).
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(autoccl.__file__).resolve().parents[1]), *filter(None, [env.get("PYTHONPATH")])]
    )
    for var in ("WORLD_SIZE", "RANK", "SLURM_NTASKS", "SLURM_PROCID", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(var, None)
    argv = shlex.split(doc.command)
    assert argv[0] == "autoccl"
    r = subprocess.run(
        [sys.executable, "-m", "autoccl", *argv[1:]],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, f"{doc.where}: {doc.command}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert "Traceback" not in r.stderr
