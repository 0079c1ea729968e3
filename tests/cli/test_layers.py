"""The layering docs/architecture.md draws holds in the code, and the picture shows the code's arrows."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _layers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("layers", ROOT / "scripts" / "layers.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["layers"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_no_arrow_points_up() -> None:
    layers = _layers()
    found = layers.arrows()
    assert found, "the script found no arrows at all"
    assert layers.violations(found) == []


def test_the_picture_shows_the_codes_arrows() -> None:
    layers = _layers()
    drawn = layers.drawn_arrows(ROOT / "docs" / "layers.svg")
    assert sorted(drawn) == sorted(layers.arrows()), "redraw: python scripts/layers.py --svg docs/layers.svg"


def test_an_upward_include_is_reported() -> None:
    layers = _layers()
    found = dict(layers.arrows())
    found[("common", "engine")] = {"csrc/common/x.h -> csrc/engine/context.h"}
    assert any("common" in line and "engine" in line for line in layers.violations(found))


def test_coord_reaching_the_search_is_reported() -> None:
    layers = _layers()
    found = dict(layers.arrows())
    found[("coord", "search")] = {"csrc/coord/src/x.cpp -> csrc/search/include/autoccl/search/search.h"}
    assert any("must not know the search" in line for line in layers.violations(found))


def test_the_libraries_below_the_engine_test_without_it() -> None:
    """The agreement layer, the search and the shared vocabulary are tested on their own: their C++ tests
    include nothing from the engine or the shim (the coordinator's tests plan with a decider of their own;
    the engine's SearchDecider, which joins the search to the coordinator, is tested in the engine's)."""
    found = []
    for lib in ("common", "search", "coord"):
        for f in sorted((ROOT / "csrc" / lib / "tests").rglob("*")):
            if f.suffix not in (".cc", ".cpp", ".h"):
                continue
            for n, line in enumerate(f.read_text().splitlines(), 1):
                if line.startswith("#include") and ('"engine/' in line or '"nccl/' in line):
                    found.append(f"{f.relative_to(ROOT)}:{n}: {line}")
    assert found == []


# The command-line modules of the synthesizer's verbs (and of adaptive, built on it); every other one serves
# the tuner, the benchmarks or the demo. __init__.py registers every verb, loading each module when it runs.
SYNTH_SIDE_CLI = {"synth.py", "adaptive.py", "__init__.py"}


def test_the_tuner_side_cli_imports_nothing_of_the_synthesizer() -> None:
    """The synthesizer shares no code with the tuner: options.py, which demo.py and bench.py use, imported
    autoccl.synth to read a size (parse_size, now in autoccl.sizes)."""
    found = []
    for path in sorted((ROOT / "python" / "autoccl" / "cli").glob("*.py")):
        if path.name in SYNTH_SIDE_CLI:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = []
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules = [node.module]
            found += [
                f"{path.name}:{node.lineno}: {m}"
                for m in modules
                if m.split(".")[:2] in (["autoccl", "synth"], ["autoccl", "adaptive"])
            ]
    assert found == []
