"""What each NCCL release lets an application bound CTAs (channels) with, read from the nccl.h of its wheels.

    python scripts/nccl_cta_table.py WHEELS          print a Markdown table, one row per wheel
    python scripts/nccl_cta_table.py WHEELS --check  also hold python/autoccl/cta_controls.py against them

WHEELS is a folder of nvidia-nccl-cu12 / nvidia-nccl-cu13 wheels, fetched for example with

    pip download --no-deps --only-binary=:all: -d WHEELS nvidia-nccl-cu12==2.28.9

The wheels are read where they lie (zip files: nothing is unpacked). From each wheel's `include/nccl.h`: the
version (NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), ncclConfig_t's struct tag and its fields whose name speaks of
CTAs, channels or CGAs, the NCCL_CTA_POLICY_* values, the entry points that take an ncclConfig_t, and the
per-call ncclCollConfig_t (its CTA fields, its other fields, the entry points that take it).
docs/cta-controls.md holds the table this printed; autoccl/cta_controls.py holds what `autoccl doctor` says,
which --check compares with every wheel's header (exit 1 on a difference). Keep the wheels and headers out of
the repository.
"""

from __future__ import annotations

import argparse
import re
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CTA_NAME = re.compile(
    r"cta|channel|cga", re.I
)  # a field about CTAs: minCTAs, CTAPolicy, nChannelsPerNetPeer...


@dataclass(frozen=True)
class Header:
    wheel: str
    version: int
    config_tag: str
    config_fields: tuple[str, ...]
    policies: tuple[tuple[str, int], ...]
    comm_entry_points: tuple[str, ...]
    coll_config_tag: str | None
    coll_config_fields: tuple[str, ...]
    per_call_entry_points: tuple[str, ...]

    @property
    def text(self) -> str:
        return f"{self.version // 10000}.{self.version % 10000 // 100}.{self.version % 100}"

    def cta(self, fields: tuple[str, ...]) -> tuple[str, ...]:
        return tuple(f for f in fields if CTA_NAME.search(f))


def _define(text: str, name: str) -> int:
    m = re.search(rf"^#define {name}\s+(\d+)", text, re.M)
    if not m:
        raise ValueError(f"no #define {name}")
    return int(m.group(1))


def _struct(text: str, typedef: str) -> tuple[str, tuple[str, ...]] | None:
    """(struct tag, field names) of `typedef struct TAG { ... } typedef;`."""
    end = re.search(rf"\}}\s*{typedef}\s*;", text)
    if not end:
        return None
    opens = list(re.finditer(r"typedef struct (\w+)\s*\{", text[: end.start()]))  # the last one is its own
    if not opens:
        return None
    body = re.sub(r"/\*.*?\*/|//[^\n]*", "", text[opens[-1].end() : end.start()], flags=re.S)
    return opens[-1].group(1), tuple(re.findall(r"(\w+)\s*;", body))


def _taking(text: str, param_type: str) -> tuple[str, ...]:
    """The entry points (not their pnccl twins) with a `param_type*` parameter, in the header's order."""
    names = []
    for m in re.finditer(r"ncclResult_t\s+(nccl\w+)\s*\(([^;]*?)\)\s*;", text, re.S):
        if re.search(rf"\b{param_type}\s*\*", m.group(2)):
            names.append(m.group(1))
    return tuple(dict.fromkeys(names))


def read_header(wheel: Path) -> Header:
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.endswith("/include/nccl.h")]
        if not names:
            raise ValueError(f"{wheel.name}: no include/nccl.h")
        text = z.read(names[0]).decode(errors="replace")
    version = (
        _define(text, "NCCL_MAJOR") * 10000 + _define(text, "NCCL_MINOR") * 100 + _define(text, "NCCL_PATCH")
    )
    config = _struct(text, "ncclConfig_t")
    if config is None:
        raise ValueError(f"{wheel.name}: no ncclConfig_t")
    coll = _struct(text, "ncclCollConfig_t")
    policies = tuple(
        (m.group(1), int(m.group(2), 0))
        for m in re.finditer(r"^#define (NCCL_CTA_POLICY_\w+)\s+(0x[0-9a-fA-F]+|\d+)", text, re.M)
    )
    return Header(
        wheel=wheel.name,
        version=version,
        config_tag=config[0],
        config_fields=config[1][
            3:
        ],  # after size, magic, version ("attributes that users should never touch")
        policies=policies,
        comm_entry_points=_taking(text, "ncclConfig_t"),
        coll_config_tag=coll[0] if coll else None,
        coll_config_fields=coll[1][3:] if coll else (),
        per_call_entry_points=_taking(text, "ncclCollConfig_t"),
    )


def table(headers: list[Header]) -> str:
    rows = [
        "| wheel | NCCL | ncclConfig_t: CTA fields | CTA policies | take an ncclConfig_t "
        "| per call: CTA fields (other fields) | per call: entry points |",
        "|---|---|---|---|---|---|---|",
    ]
    for h in headers:
        flavour = h.wheel.split("-")[0].removeprefix("nvidia_nccl_")
        policies = ", ".join(f"{n.removeprefix('NCCL_CTA_POLICY_')}={v}" for n, v in h.policies) or "—"
        if h.coll_config_tag:
            others = [f for f in h.coll_config_fields if f not in h.cta(h.coll_config_fields)]
            per_call = (
                f"`{h.coll_config_tag}`: {', '.join(h.cta(h.coll_config_fields))} ({', '.join(others)})"
            )
            entry = ", ".join(h.per_call_entry_points)
        else:
            per_call, entry = "—", "—"
        comm = ", ".join(h.cta(h.config_fields)) or "—"
        rows.append(
            f"| {flavour} | {h.text} | `{h.config_tag}`: {comm} | {policies} "
            f"| {', '.join(h.comm_entry_points)} | {per_call} | {entry} |"
        )
    return "\n".join(rows)


def check(headers: list[Header]) -> list[str]:
    """Where autoccl/cta_controls.py says otherwise than a header."""
    sys.path.insert(0, str(ROOT / "python"))
    from autoccl import cta_controls as C

    problems = []
    for h in headers:
        c = C.controls_of(h.version)
        pairs = [
            ("ncclConfig_t CTA fields", c.comm_fields, h.cta(h.config_fields)),
            ("CTA policies", c.policies, tuple(n for n, _ in h.policies)),
            ("entry points taking ncclConfig_t", c.comm_entry_points, h.comm_entry_points),
            ("ncclCollConfig_t CTA fields", c.per_call_fields, h.cta(h.coll_config_fields)),
            ("entry points taking ncclCollConfig_t", c.per_call_entry_points, h.per_call_entry_points),
        ]
        for what, says, header in pairs:
            if set(says) != set(header):
                problems.append(
                    f"{h.wheel} ({h.text}): {what}: cta_controls says {says}, the header {header}"
                )
    newest = max(((h.version // 10000, h.version % 10000 // 100) for h in headers), default=(0, 0))
    if newest > C.NEWEST_READ:
        problems.append(f"cta_controls.NEWEST_READ is {C.NEWEST_READ}; a header of {newest} was read")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("wheels", type=Path, help="a folder of nvidia-nccl-cu12/-cu13 wheels")
    parser.add_argument("--check", action="store_true", help="hold autoccl/cta_controls.py against them")
    args = parser.parse_args()
    wheels = sorted(args.wheels.glob("nvidia_nccl_cu*.whl"))
    if not wheels:
        print(f"nccl_cta_table: no nvidia_nccl_cu*.whl in {args.wheels}", file=sys.stderr)
        return 2
    headers = sorted((read_header(w) for w in wheels), key=lambda h: (h.version, h.wheel))
    print(table(headers))
    if args.check:
        problems = check(headers)
        for p in problems:
            print(f"nccl_cta_table: {p}", file=sys.stderr)
        if problems:
            return 1
        print(f"\nautoccl/cta_controls.py agrees with the {len(headers)} headers read", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
