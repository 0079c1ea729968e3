"""How the synthesizer's package is put together: no import cycle between the package and its modules."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "autoccl" / "synth"


def test_no_module_of_the_package_imports_the_package() -> None:
    """topofile imported `ext` from autoccl.synth inside its functions, while autoccl.synth imports topofile
    at the top: a cycle that only the deferred import kept working. A module of the package imports what it
    needs from the package's modules (autoccl.synth._ext), never from the package itself."""
    found = []
    for path in sorted(PACKAGE.glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module == "autoccl.synth" and node.level == 0:
                names = [a.name for a in node.names if not (PACKAGE / f"{a.name}.py").is_file()]
            elif isinstance(node, ast.ImportFrom) and node.level == 1 and node.module is None:
                names = [a.name for a in node.names if not (PACKAGE / f"{a.name}.py").is_file()]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name == "autoccl.synth"]
            found += [f"{path.name}:{node.lineno}: {name}" for name in names]
    assert found == []


def test_ext_is_one_loader_reexported() -> None:
    """The package's public `ext` is the loader the topology files use (one cached module, not two)."""
    import autoccl.synth
    from autoccl.synth import _ext, topofile

    assert autoccl.synth.ext is _ext.ext is topofile.ext
    assert "ext" in autoccl.synth.__all__
