"""The layers of autoccl as its code has them: which component includes (C++) or imports (Python) which.

    python scripts/layers.py                 print the components' arrows, with the files behind each
    python scripts/layers.py --check         fail on an arrow the layering forbids (one that points up)
    python scripts/layers.py --svg FILE      draw the picture docs/architecture.md opens with

Every arrow comes from the code (tests left out): an `#include "..."` that resolves to a file of another
component, an `import autoccl.X` of another package. A component may only reach components on lower rows;
the dashed lines are what runs what (a process started, a library loaded), which no include shows.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CXX_SUFFIXES = {".h", ".cc", ".cpp"}
# Where the C++ components' quoted includes resolve (besides the including file's own folder).
INCLUDE_DIRS = [
    "csrc",
    "csrc/common/include",
    "csrc/search/include",
    "csrc/coord/include",
    "csrc/synth/include",
]


@dataclass(frozen=True)
class Component:
    name: str
    paths: tuple[str, ...]  # folders or files; the longest match wins
    row: int  # 0 = bottom; an arrow may only point to a lower row
    col: float
    says: str


COMPONENTS = [
    Component("common", ("csrc/common/",), 0, 1.0, "common: Config, TaskKey,\nplan segments, median/MAD"),
    Component("search", ("csrc/search/",), 1, -0.3, "search: one task's plan\n(TaskSearch)"),
    Component("coord", ("csrc/coord/",), 2, 2.1, "coord: agreement per\n(task, call); boards, TCP"),
    Component(
        "engine", ("csrc/engine/",), 3, 1.0, "engine: Context, decision\nsources, SearchDecider, timing"
    ),
    Component(
        "shim", ("csrc/nccl/",), 4, 1.0, "shim (csrc/nccl): tuner.cc,\nprofiler.cc; libautoccl-nccl.so"
    ),
    Component("nccl-abi", ("csrc/nccl/abi/",), 3, 3.2, "nccl/abi: NCCL's plugin\ninterfaces v5, v6"),
    Component("emu", ("csrc/emu/",), 4, 3.2, "emu: NCCL emulator\n(autoccl-emu)"),
    Component("synth", ("csrc/synth/",), 1, 3.2, "synth: collective\nsynthesis (_synth)"),
    Component(
        "cli", ("python/autoccl/cli/", "python/autoccl/__main__.py"), 5, 7.6, "autoccl.cli:\nevery verb"
    ),
    Component("synth.py", ("python/autoccl/synth/",), 3, 5.5, "autoccl.synth"),
    Component(
        "adaptive",
        ("python/autoccl/adaptive/",),
        4,
        5.5,
        "autoccl.adaptive: topology,\nprofile, executor, re-plan",
    ),
    Component("demo", ("python/autoccl/demo/",), 4, 7.6, "autoccl.demo"),
    Component("bench", ("python/autoccl/bench/",), 4, 9.7, "autoccl.bench: nccl-tests,\ncoll, train, report"),
    Component("emu.py", ("python/autoccl/emu/",), 3, 7.6, "autoccl.emu: scenarios,\nmodel, calibration"),
    Component(
        "resilience",
        ("python/autoccl/resilience/",),
        3,
        9.7,
        "autoccl.resilience:\nstragglers, lost ranks",
    ),
    Component(
        "py-core",
        ("python/autoccl/",),
        2,
        8.65,
        "tables, settings, tuner_env,\nnccl_probe, collectives",
    ),
]
# What runs what: no include or import shows these.
RUNS = [
    ("emu", "shim", "dlopen"),
    ("emu.py", "emu", "runs"),
]


def component_of(rel: str) -> Component | None:
    best: Component | None = None
    best_len = -1
    for c in COMPONENTS:
        for p in c.paths:
            if (rel == p or (p.endswith("/") and rel.startswith(p))) and len(p) > best_len:
                best, best_len = c, len(p)
    return best


def _is_test(rel: str) -> bool:
    return "/tests/" in rel or rel.startswith("tests/")


def _cxx_arrows() -> dict[tuple[str, str], set[str]]:
    arrows: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted((ROOT / "csrc").rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.suffix not in CXX_SUFFIXES or _is_test(rel):
            continue
        src = component_of(rel)
        for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', path.read_text(errors="replace"), re.M):
            for base in [path.parent, *(ROOT / d for d in INCLUDE_DIRS)]:
                target = (base / inc).resolve()
                if target.is_file():
                    dst = component_of(target.relative_to(ROOT).as_posix())
                    if src and dst and src != dst:
                        arrows[(src.name, dst.name)].add(f"{rel} -> {target.relative_to(ROOT).as_posix()}")
                    break
    return arrows


def _module_file(module: str) -> str | None:
    """The file of python module `module` (autoccl.x.y), or of the compiled module's source component."""
    if module == "autoccl._synth":
        return "csrc/synth/python/bindings.cpp"
    base = ROOT / "python" / Path(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate.relative_to(ROOT).as_posix()
    return None


def _py_arrows() -> dict[tuple[str, str], set[str]]:
    arrows: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted((ROOT / "python" / "autoccl").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        src = component_of(rel)
        modules: list[str] = []
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Import):
                modules += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                modules += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for module in modules:
            if not module.startswith("autoccl"):
                continue
            target = _module_file(module)
            dst = component_of(target) if target else None
            if src and dst and src != dst and target:
                arrows[(src.name, dst.name)].add(f"{rel} -> {target}")
    return arrows


def arrows() -> dict[tuple[str, str], set[str]]:
    """(from, to) -> the file pairs behind the arrow."""
    found = _cxx_arrows()
    for key, files in _py_arrows().items():
        found[key] |= files
    return dict(sorted(found.items()))


# Arrows that point down and are still forbidden: the agreement layer knows plans, not how they are made (the
# engine's SearchDecider joins coord and search).
FORBIDDEN = {("coord", "search"): "the agreement layer must not know the search"}


def violations(found: dict[tuple[str, str], set[str]]) -> list[str]:
    row = {c.name: c.row for c in COMPONENTS}
    out = [
        f"{a} -> {b} points up (row {row[a]} to row {row[b]}): " + "; ".join(sorted(files))
        for (a, b), files in found.items()
        if row[b] >= row[a]
    ]
    out += [
        f"{a} -> {b}: {FORBIDDEN[(a, b)]}: " + "; ".join(sorted(files))
        for (a, b), files in found.items()
        if (a, b) in FORBIDDEN
    ]
    return out


def _route(
    a: tuple[float, float], b: tuple[float, float], boxes: list[tuple[float, float]], w: float, h: float
) -> float:
    """The bend (matplotlib's arc3 rad) of the first of a straight line and ever wider arcs that crosses no
    box but its ends'."""

    def clear(rad: float) -> bool:
        (xa, ya), (xb, yb) = a, b
        # arc3: a quadratic Bezier whose control point is (rad * dy, -rad * dx) off the chord's middle
        cx, cy = (xa + xb) / 2 + rad * (yb - ya), (ya + yb) / 2 - rad * (xb - xa)
        for i in range(1, 60):
            t = i / 60
            x = (1 - t) ** 2 * xa + 2 * (1 - t) * t * cx + t * t * xb
            y = (1 - t) ** 2 * ya + 2 * (1 - t) * t * cy + t * t * yb
            for bx, by in boxes:
                if (bx, by) not in (a, b) and abs(x - bx) < w / 2 + 0.05 and abs(y - by) < h / 2 + 0.05:
                    return False
        return True

    for rad in (0.0, 0.15, -0.15, 0.3, -0.3, 0.45, -0.45):
        if clear(rad):
            return rad
    return 0.0


def draw(found: dict[tuple[str, str], set[str]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

    plt.rcParams["svg.fonttype"] = "none"
    plt.rcParams["svg.hashsalt"] = "autoccl-layers"
    w, h = 1.8, 0.62
    pos = {c.name: (c.col, c.row * 1.05) for c in COMPONENTS}
    fig, ax = plt.subplots(figsize=(11.5, 6.2))
    ax.set_xlim(-1.3, 10.7)
    ax.set_ylim(-0.7, 5.75)
    ax.axis("off")
    ax.axvline(4.35, color="#bbbbbb", lw=0.8, ls=":")
    ax.text(-1.2, 5.55, "C++ (csrc/)", fontsize=10, weight="bold")
    ax.text(4.5, 5.55, "Python (python/autoccl/)", fontsize=10, weight="bold")
    boxes = {}
    for c in COMPONENTS:
        x, y = pos[c.name]
        colour = "#dbe9f6" if c.paths[0].startswith("csrc") else "#e6f4dc"
        box = FancyBboxPatch(
            (x - w / 2, y - h / 2), w, h, boxstyle="round,pad=0.02", fc=colour, ec="#445566", lw=1.0
        )
        ax.add_patch(box)
        boxes[c.name] = box
        ax.text(x, y, c.says, ha="center", va="center", fontsize=7.6)
    centres = list(pos.values())
    lines = [(a, b, "", "-", "#223344") for a, b in found]
    lines += [(a, b, label, "--", "#aa5522") for a, b, label in RUNS]
    for a, b, label, style, colour in lines:
        rad = _route(pos[a], pos[b], centres, w, h)
        ax.add_patch(
            FancyArrowPatch(
                posA=pos[a],
                posB=pos[b],
                patchA=boxes[a],
                patchB=boxes[b],
                arrowstyle="-|>",
                mutation_scale=11,
                lw=1.1,
                ls=style,
                color=colour,
                connectionstyle=f"arc3,rad={rad}",
            )
        )
        if label:  # at the middle of the arc
            (xa, ya), (xb, yb) = pos[a], pos[b]
            cx, cy = (xa + xb) / 2 + rad * (yb - ya), (ya + yb) / 2 - rad * (xb - xa)
            mx, my = (xa + xb) / 4 + cx / 2, (ya + yb) / 4 + cy / 2
            ax.text(mx, my + 0.06, label, fontsize=7, color=colour, ha="center", va="bottom")
    ax.text(
        -1.2,
        -0.62,
        "solid: #include / import, drawn from the code by scripts/layers.py; dashed: starts or loads. "
        "Every arrow points down.",
        fontsize=7.5,
        color="#555555",
    )
    fig.tight_layout()
    fig.savefig(out, format=out.suffix.lstrip(".") or "svg", metadata={"Date": None})
    plt.close(fig)
    if out.suffix == ".svg":  # the arrows drawn, for the test that holds the picture to the code
        text = out.read_text()
        listed = "".join(f"\n  {a} -> {b}" for a, b in found)
        out.write_text(text.replace("<defs>", f"<desc>arrows:{listed}\n</desc>\n <defs>", 1))


def drawn_arrows(svg: Path) -> list[tuple[str, str]]:
    m = re.search(r"<desc>arrows:(.*?)</desc>", svg.read_text(), re.S)
    if not m:
        return []
    return [tuple(line.strip().split(" -> ")) for line in m.group(1).strip().splitlines()]  # type: ignore[misc]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail on an arrow that points up")
    ap.add_argument("--svg", type=Path, help="draw the layers into this file (.svg or .png)")
    args = ap.parse_args(argv)
    found = arrows()
    if args.svg:
        draw(found, args.svg)
    bad = violations(found)
    if args.check:
        for line in bad:
            print(line, file=sys.stderr)
        return 1 if bad else 0
    if not args.svg:
        for (a, b), files in found.items():
            print(f"{a} -> {b}")
            for f in sorted(files):
                print(f"    {f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
