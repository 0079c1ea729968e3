"""Tuning tables (`autoccl table v1`, docs/architecture.md) and the cache directory that holds them.

The C++ library reads and writes the same format. Both validate against one schema,
`autoccl/data/table_schema.json` (the C++ constants are generated from it at build time), so a table
this module accepts is one the library loads, and one it refuses the library refuses too. Writes take
the lock file the library takes (`<table>.lock`, flock) and replace the table atomically.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

from filelock import FileLock, Timeout

TABLE_SUFFIX = ".table"
LOCK_TIMEOUT_S = 60.0
_SCHEMA_PATH = Path(__file__).resolve().parent / "data" / "table_schema.json"
_UINT = re.compile(r"[0-9]{1,20}")
# A plain decimal number, as the library accepts: digits[.digits][e[+-]digits].
_DECIMAL = re.compile(r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_BLANKS = " \t\n\v\f\r"  # what the library's trim() removes (C isspace)


class TableError(ValueError):
    """A file that is not a valid autoccl table."""


@cache
def schema() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(_SCHEMA_PATH.read_text(encoding="utf-8"))
    return data


def header() -> str:
    return str(schema()["header"])


@dataclass
class Table:
    fingerprint: str
    meta: dict[str, str]
    tasks: list[dict[str, str]] = field(default_factory=list)
    # pairs the online search measured per task (best median against NCCL's choice's); table mode reads none
    pairs: list[dict[str, str]] = field(default_factory=list)

    def dumps(self) -> str:
        lines = [header(), f"fingerprint {self.fingerprint}", "meta " + _kv(self.meta)]
        lines += ["task " + _kv(t) for t in self.tasks]
        lines += ["pair " + _kv(p) for p in self.pairs]
        return "\n".join(lines) + "\n"

    def task_key(self, task: dict[str, str]) -> tuple[str, int, int]:
        return _task_key(task)


def _task_key(task: dict[str, str]) -> tuple[str, int, int]:
    return (_norm(task["coll"]), int(task["bytes"]), int(task.get("pipe", "1")))


def _pair_key(pair: dict[str, str]) -> tuple[str, int, int, str, str]:
    return (*_task_key(pair), _norm(pair["algo"]), _norm(pair["proto"]))


def _kv(d: dict[str, str]) -> str:
    return " ".join(f"{k}={_quote(v)}" for k, v in d.items())


def _quote(v: str) -> str:
    if v and all(c.isalnum() or c in "._-:+/" for c in v):
        return v
    return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _norm(name: str) -> str:
    """Names compare as the library compares them: lower case, without '_'."""
    return name.lower().replace("_", "")


def _split_pairs(text: str, lineno: int) -> dict[str, str]:
    """key=value pairs separated by blanks; a value may be double-quoted with \\ escapes (as the library)."""
    out: dict[str, str] = {}
    i, n = 0, len(text)
    while i < n:
        while i < n and text[i] in " \t":
            i += 1
        if i >= n:
            break
        eq = text.find("=", i)
        if eq < 0:
            raise TableError(f"line {lineno}: expected key=value")
        key = text[i:eq]
        if not key or " " in key or "\t" in key:
            raise TableError(f"line {lineno}: bad key {key!r}")
        i = eq + 1
        value: list[str] = []
        if i < n and text[i] == '"':
            i += 1
            closed = False
            while i < n:
                c = text[i]
                i += 1
                if c == "\\" and i < n:
                    value.append(text[i])
                    i += 1
                    continue
                if c == '"':
                    closed = True
                    break
                value.append(c)
            if not closed:
                raise TableError(f"line {lineno}: unterminated quote")
        else:
            while i < n and text[i] not in " \t":
                value.append(text[i])
                i += 1
        out[key] = "".join(value)
    return out


def _check_int(kind: str, key: str, spec: dict[str, Any], fields: dict[str, str], lineno: int) -> int:
    if key not in fields:
        if spec.get("required"):
            raise TableError(f"line {lineno}: {kind} needs {key}=")
        return int(spec.get("default", 0))
    text = fields[key]
    value = int(text) if _UINT.fullmatch(text) else -1
    lo, hi, nonzero_min = int(spec["min"]), int(spec["max"]), int(spec.get("nonzero_min", 0))
    if value < lo or value > hi or (value and value < nonzero_min):
        extra = f" and 0 or at least {nonzero_min}" if nonzero_min else ""
        raise TableError(f"line {lineno}: {kind} {key}={text!r} must be an integer in [{lo}, {hi}]{extra}")
    return value


def _check_float(kind: str, key: str, spec: dict[str, Any], fields: dict[str, str], lineno: int) -> None:
    if key not in fields:
        if spec.get("required"):
            raise TableError(f"line {lineno}: {kind} needs {key}=")
        return
    text = fields[key]
    value = float(text) if _DECIMAL.fullmatch(text) else math.nan
    if not math.isfinite(value) or value < float(spec["min"]) or value > float(spec["max"]):
        raise TableError(f"line {lineno}: {kind} {key}={text!r} must be a finite number in [0, 1e12]")


def _check_meta(fields: dict[str, str], lineno: int) -> None:
    spec = schema()["meta"]
    known = set(spec["strings"]) | set(spec["ints"])
    for key in fields:
        if key not in known:
            raise TableError(f"line {lineno}: meta has an unknown field {key!r}")
    for key, s in spec["strings"].items():
        if s.get("required") and key not in fields:
            raise TableError(f"line {lineno}: meta needs {key}=")
        if key in fields and len(fields[key].encode("utf-8", "surrogateescape")) > int(s["max_length"]):
            raise TableError(f"line {lineno}: meta {key} is longer than {s['max_length']} characters")
    for key, s in spec["ints"].items():
        _check_int("meta", key, s, fields, lineno)


def _check_line(kind: str, fields: dict[str, str], lineno: int) -> None:
    """A `task` or `pair` line against its part of the schema."""
    spec = schema()[kind]
    names = schema()["names"]
    known = set(spec["names"]) | set(spec["ints"]) | set(spec["floats"])
    for key in fields:
        if key not in known:
            raise TableError(f"line {lineno}: {kind} has an unknown field {key!r}")
    what = {"coll": "a collective", "algo": "an algorithm", "proto": "a protocol"}
    for key in spec["names"]:
        if _norm(fields.get(key, "")) not in names[key]:
            value = fields.get(key, "")
            raise TableError(f"line {lineno}: {kind} {key}={value!r} is not {what.get(key, key)}")
    values = {key: _check_int(kind, key, s, fields, lineno) for key, s in spec["ints"].items()}
    for key, s in spec["floats"].items():
        _check_float(kind, key, s, fields, lineno)
    for a, b in spec.get("exclusive", []):
        if values.get(a) and values.get(b):
            raise TableError(f"line {lineno}: {kind} {a} and {b} are exclusive")


def fnv1a64(data: bytes) -> int:
    h = 14695981039346656037
    for byte in data:
        h ^= byte
        h = (h * 1099511628211) & 0xFFFFFFFFFFFFFFFF
    return h


def fingerprint_of(meta: dict[str, str]) -> str:
    """The fingerprint id of a meta line's canonical fields (the library's Fingerprint::id())."""
    parts = []
    for key in schema()["fingerprint"]["canonical"]:
        value = meta.get(key, "")
        if key == "gpu":
            escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ").replace("\r", " ")
            parts.append(f'gpu="{escaped}"')
        else:
            parts.append(f"{key}={int(value)}")
    return f"{fnv1a64(' '.join(parts).encode('utf-8', 'surrogateescape')):016x}"


def parse_table(text: str, expect_fingerprint: str | None = None) -> Table:
    """A validated table, or TableError saying what is wrong (the library's verdict, same schema)."""
    try:
        return _parse_table(text, expect_fingerprint)
    except TableError as e:
        # The library writes whole files that end in a newline; a refused file without one was most likely
        # cut short (a copy interrupted): say so, the verdict is the same.
        if text and not text.endswith("\n") and str(e).startswith(f"line {text.count(chr(10)) + 1}:"):
            raise TableError(f"{e} (the file ends mid-line: cut short?)") from None
        raise


def _parse_table(text: str, expect_fingerprint: str | None) -> Table:
    fp_spec = schema()["fingerprint"]
    lines = text.split("\n")
    seen_header = False
    fingerprint = ""
    meta: dict[str, str] | None = None
    tasks: dict[tuple[str, int, int], dict[str, str]] = {}
    pairs: dict[tuple[str, int, int, str, str], dict[str, str]] = {}
    for lineno, raw in enumerate(lines, start=1):
        line = raw.strip(_BLANKS)
        if not seen_header:
            if not line:
                continue
            if line != header():
                raise TableError(f"line {lineno}: not an autoccl table (the first line must be {header()!r})")
            seen_header = True
            continue
        if not line or line.startswith("#"):
            continue
        kind, _, rest = line.partition(" ")
        rest = rest.strip(_BLANKS)
        if kind == "fingerprint":
            if len(rest) != int(fp_spec["hex_digits"]) or any(c not in "0123456789abcdef" for c in rest):
                raise TableError(f"line {lineno}: fingerprint must be 16 lower-case hex digits")
            fingerprint = rest
        elif kind == "meta":
            fields = _split_pairs(rest, lineno)
            _check_meta(fields, lineno)
            meta = fields
        elif kind == "task":
            fields = _split_pairs(rest, lineno)
            _check_line("task", fields, lineno)
            tasks[_task_key(fields)] = fields
        elif kind == "pair":
            fields = _split_pairs(rest, lineno)
            _check_line("pair", fields, lineno)
            pairs[_pair_key(fields)] = fields
        else:
            raise TableError(f"line {lineno}: unknown line kind {kind!r}")
    if not seen_header:
        raise TableError("empty file")
    if not fingerprint or meta is None:
        raise TableError("missing fingerprint or meta line")
    actual = fingerprint_of(meta)
    if actual != fingerprint:
        raise TableError(f"fingerprint {fingerprint} does not match its meta line ({actual})")
    if expect_fingerprint and expect_fingerprint != fingerprint:
        raise TableError(f"the table is for fingerprint {fingerprint}, not {expect_fingerprint}")
    return Table(fingerprint, meta, list(tasks.values()), list(pairs.values()))


def load_table(path: Path, expect_fingerprint: str | None = None) -> Table:
    try:
        if not path.is_file():
            raise TableError(f"{path} is not a regular file" if path.exists() else f"{path} does not exist")
        if path.stat().st_size > int(schema()["max_file_bytes"]):
            raise TableError(f"{path} is larger than {int(schema()['max_file_bytes']) >> 20} MiB")
        data = path.read_bytes()
    except OSError as e:
        raise TableError(f"cannot read {path}: {e.strerror or e}") from None
    return parse_table(data.decode("utf-8", "surrogateescape"), expect_fingerprint)


def cache_dir(override: str | None = None) -> Path:
    if override:
        return Path(override)
    if os.environ.get("AUTOCCL_CACHE_DIR", "").strip():
        return Path(os.environ["AUTOCCL_CACHE_DIR"].strip())
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(xdg) / "autoccl"


def tables_dir(override: str | None = None) -> Path:
    return cache_dir(override) / "tables"


def cached_tables(override: str | None = None) -> list[Path]:
    """Every `<fingerprint>.table` entry of the cache (files or not: a directory there is reported, not
    skipped). A cache path that exists but is no directory is an error."""
    d = tables_dir(override)
    for folder in (d, d.parent):  # a cache directory given as a file would read as an empty cache
        if folder.exists() and not folder.is_dir():
            raise TableError(f"{folder} is not a directory")
    if not d.is_dir():
        return []
    try:
        return sorted(p for p in d.iterdir() if p.name.endswith(TABLE_SUFFIX) and not p.name.startswith("."))
    except OSError as e:
        raise TableError(f"cannot list {d}: {e.strerror or e}") from None


def table_lock(path: Path) -> FileLock:
    """The lock the library takes for `path` (flock on `<path>.lock`)."""
    return FileLock(str(path) + ".lock", timeout=LOCK_TIMEOUT_S)


# How long a lock is tried before the caller is told that it waits for another process.
LOCK_QUIET_S = 0.5


@contextmanager
def held(path: Path, on_wait: Callable[[str], None] | None = None) -> Iterator[None]:
    """`path`'s lock, held for the block. A lock another process holds past LOCK_QUIET_S is said through
    `on_wait` (a job's writer, another `autoccl cache` command: the wait would otherwise be a minute's
    silence), then waited for up to LOCK_TIMEOUT_S; past that, TableError."""
    lock = table_lock(path)
    try:
        lock.acquire(timeout=LOCK_QUIET_S)
    except Timeout:
        if on_wait:
            on_wait(f"waiting for {path}.lock: another process holds it (up to {LOCK_TIMEOUT_S:.0f} s)")
        try:
            lock.acquire(timeout=LOCK_TIMEOUT_S)
        except Timeout:
            raise TableError(
                f"{path}.lock is held by another process for more than {LOCK_TIMEOUT_S:.0f} s"
            ) from None
    try:
        yield
    finally:
        lock.release()


def write_table_atomic(
    table: Table, path: Path, *, merge: bool = False, on_wait: Callable[[str], None] | None = None
) -> int:
    """Writes `table` to `path` under the library's lock (temporary file + rename). With `merge`, the
    table already there (if valid and of the same fingerprint) keeps its tasks that `table` does not have.
    Returns the number of tasks written. `on_wait`: as held()'s."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # filelock takes a lock file it cannot create (no permission, a file system that refuses new files such
    # as /proc) for one another process holds and retries for a minute: open it once here, so such a place
    # is an OSError at once (the CLI's one sentence) rather than a minute's wait and a wrong reason
    os.close(os.open(str(path) + ".lock", os.O_WRONLY | os.O_CREAT, 0o644))
    with held(path, on_wait):
        return _write_table(table, path, merge)


def is_cache_table_path(path: Path) -> bool:
    """Whether the library may read or write `path` (a `<fingerprint>.table` in some cache's `tables/`
    folder, or a table whose lock file is already there): writers of such a path take its lock."""
    lock = path.with_name(path.name + ".lock")
    return lock.exists() or (path.parent.name == "tables" and path.name.endswith(TABLE_SUFFIX))


def write_table_file(table: Table, path: Path, on_wait: Callable[[str], None] | None = None) -> int:
    """Writes `table` to a file of the user's outside any cache (an export): atomically, without the library's
    lock, which would leave `<path>.lock` beside it; a path the library may use takes the lock as usual."""
    if is_cache_table_path(path):
        return write_table_atomic(table, path, on_wait=on_wait)
    path.parent.mkdir(parents=True, exist_ok=True)
    return _write_table(table, path, False)


def _write_table(table: Table, path: Path, merge: bool) -> int:
    """The write itself (temporary file + rename); the caller holds the lock where one is needed."""
    out = table
    if merge and path.exists():
        current = load_table(path, table.fingerprint)
        mine = {_task_key(t) for t in table.tasks}
        kept = [t for t in current.tasks if _task_key(t) not in mine]
        my_pairs = {_pair_key(p) for p in table.pairs}
        kept_pairs = [p for p in current.pairs if _pair_key(p) not in my_pairs]
        out = Table(table.fingerprint, table.meta, kept + table.tasks, kept_pairs + table.pairs)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        try:
            f = open(tmp, "w", encoding="utf-8", errors="surrogateescape")  # closed by the with below
        except OSError as e:  # the user named the table, not its temporary file
            why = f"no file can be created in its folder ({e.strerror})"
            raise OSError(e.errno, why, str(path)) from None
        with f:
            f.write(out.dumps())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return len(out.tasks)
