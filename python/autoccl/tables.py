"""Tuning tables (`autoccl table v1`, docs/architecture.md) and the cache directory that holds them.

The C++ library writes and reads the same format; this module is what `autoccl cache` uses."""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path

HEADER = "# autoccl table v1"
TABLE_SUFFIX = ".table"


class TableError(ValueError):
    """A file that is not a valid autoccl table."""


@dataclass
class Table:
    fingerprint: str
    meta: dict[str, str]
    tasks: list[dict[str, str]] = field(default_factory=list)

    def dumps(self) -> str:
        lines = [HEADER, f"fingerprint {self.fingerprint}", "meta " + _kv(self.meta)]
        lines += ["task " + _kv(t) for t in self.tasks]
        return "\n".join(lines) + "\n"


def _kv(d: dict[str, str]) -> str:
    return " ".join(f"{k}={_quote(v)}" for k, v in d.items())


def _quote(v: str) -> str:
    return v if v and all(c.isalnum() or c in "._-:+/" for c in v) else '"' + v.replace('"', "'") + '"'


def _parse_kv(text: str, lineno: int) -> dict[str, str]:
    out: dict[str, str] = {}
    try:
        parts = shlex.split(text)
    except ValueError as e:
        raise TableError(f"line {lineno}: {e}") from e
    for part in parts:
        key, sep, value = part.partition("=")
        if not sep or not key:
            raise TableError(f"line {lineno}: expected key=value, got {part!r}")
        out[key] = value
    return out


def parse_table(text: str) -> Table:
    lines = text.splitlines()
    if not lines or lines[0].strip() != HEADER:
        raise TableError(f"not an autoccl table (first line must be {HEADER!r})")
    fingerprint = ""
    meta: dict[str, str] = {}
    tasks: list[dict[str, str]] = []
    for lineno, raw in enumerate(lines[1:], start=2):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        kind, _, rest = line.partition(" ")
        if kind == "fingerprint":
            fingerprint = rest.strip()
            if len(fingerprint) != 16 or any(c not in "0123456789abcdef" for c in fingerprint):
                raise TableError(f"line {lineno}: fingerprint must be 16 lowercase hex digits")
        elif kind == "meta":
            meta = _parse_kv(rest, lineno)
        elif kind == "task":
            task = _parse_kv(rest, lineno)
            for required in ("coll", "bytes"):
                if required not in task:
                    raise TableError(f"line {lineno}: task without {required}=")
            tasks.append(task)
        else:
            raise TableError(f"line {lineno}: unknown record {kind!r}")
    if not fingerprint:
        raise TableError("no fingerprint line")
    return Table(fingerprint, meta, tasks)


def load_table(path: Path) -> Table:
    try:
        return parse_table(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as e:
        raise TableError(f"{path}: not text ({e.reason})") from e


def cache_dir(override: str | None = None) -> Path:
    if override:
        return Path(override)
    if os.environ.get("AUTOCCL_CACHE_DIR"):
        return Path(os.environ["AUTOCCL_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "autoccl"


def tables_dir(override: str | None = None) -> Path:
    return cache_dir(override) / "tables"


def cached_tables(override: str | None = None) -> list[Path]:
    d = tables_dir(override)
    return sorted(d.glob("*" + TABLE_SUFFIX)) if d.is_dir() else []


def write_table_atomic(table: Table, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(table.dumps(), encoding="utf-8")
    os.replace(tmp, path)
