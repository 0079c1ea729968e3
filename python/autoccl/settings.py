"""Every AUTOCCL_* environment variable: what it is, its range, and the check the CLI makes before it
launches anything (docs/architecture.md has the table). The C++ library checks the variables it reads
itself (an invalid value there means one WARN through NCCL's logger and no tuner on every rank, so that
a bad setting never fails a job for the library's own sake); the CLI refuses the same values with one
sentence and a non-zero exit before a job starts. tests/cli/test_settings.py keeps the two in step."""

from __future__ import annotations

import difflib
import ipaddress
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

COLLS = ("broadcast", "reduce", "allgather", "reducescatter", "allreduce")
ALGOS = ("tree", "ring", "collnetdirect", "collnetchain", "nvls", "nvlstree", "pat")
PROTOS = ("ll", "ll128", "simple")
MIN_CHUNK, MAX_CHUNK = 4096, 16 << 20

Check = Callable[[str, Mapping[str, str]], str | None]  # (value, environment) -> why it is invalid


class SettingError(ValueError):
    """An AUTOCCL_* value the library would refuse (message: one sentence naming the variable)."""


@dataclass(frozen=True)
class Variable:
    name: str
    reader: str  # library | cli | emulator | tests
    values: str  # range, as the docs' table says it
    check: Check | None


# What the library trims from a value (C isspace in the "C" locale): str.strip() would also remove Unicode
# spaces, and the CLI would pass a value (a pasted "off\u00a0") the library refuses.
_C_SPACE = " \t\n\v\f\r"


def _int_range(lo: int, hi: int) -> Check:
    def check(v: str, _env: Mapping[str, str]) -> str | None:
        if not re.fullmatch(r"[0-9]{1,20}", v) or not lo <= int(v) <= hi:
            return f"must be an integer in [{lo}, {hi}]"
        return None

    return check


def _off_or_at_least(lo: int, hi: int) -> Check:
    """0 (off), or an integer in [lo, hi]."""

    def check(v: str, _env: Mapping[str, str]) -> str | None:
        if not re.fullmatch(r"[0-9]{1,20}", v) or not (int(v) == 0 or lo <= int(v) <= hi):
            return f"must be 0 (off) or an integer in [{lo}, {hi}]"
        return None

    return check


def _seconds(lo: float, hi: float) -> Check:
    def check(v: str, _env: Mapping[str, str]) -> str | None:
        if not re.fullmatch(r"[0-9]+(\.[0-9]+)?", v) or len(v) > 20 or not lo <= float(v) <= hi:
            return f"must be a number of seconds in [{lo:g}, {hi:g}]"
        return None

    return check


def _int_range_or(word: str, lo: int, hi: int) -> Check:
    """An integer in [lo, hi], or `word`."""
    in_range = _int_range(lo, hi)

    def check(v: str, env: Mapping[str, str]) -> str | None:
        if v == word or in_range(v, env) is None:
            return None
        return f"must be an integer in [{lo}, {hi}] or {word}"

    return check


def _one_of(*choices: str) -> Check:
    def check(v: str, _env: Mapping[str, str]) -> str | None:
        return None if v in choices else f"is not one of {', '.join(choices)}"

    return check


def _manual_channels(v: str, _env: Mapping[str, str]) -> str | None:
    m = re.fullmatch(r"([0-9]{1,2}),([0-9]{1,2}|max)", v)
    if not m or not 1 <= int(m.group(1)) <= 64 or (m.group(2) != "max" and not 1 <= int(m.group(2)) <= 64):
        return "must be HIDDEN,EXPOSED: channel counts in [1, 64], EXPOSED may be max"
    return None


_STEP_ARMS_FORM = (
    "must be off, hidden=A1[,A2...], estimated=A1[,A2...] or both joined by ';': 1 to 4 distinct arms each, "
    "an arm a channel count C in [1, 64], a protocol P of ll, ll128, simple, or C/P, each optionally "
    "followed by +E, or +E alone in hidden=: at least E channels, a count or max, for the calls left exposed"
)
_STEP_ARM = re.compile(r"(?:([0-9]{1,2})(?:/(ll|ll128|simple))?|(ll|ll128|simple))?(?:\+([0-9]{1,2}|max))?")


def _floor_channels(text: str | None) -> int:
    """An arm's floor for the calls it leaves exposed as the library reads it: 0 none, `max` 64."""
    return 0 if text is None else 64 if text == "max" else int(text)


def _names_nothing(m: re.Match[str] | None, *, estimated: bool) -> bool:
    """An arm names something: limits for the calls it limits (an estimated arm must), a floor, or both."""
    if m is None:
        return True
    limits_nothing = m.group(1) is None and m.group(3) is None
    return limits_nothing and (estimated or m.group(4) is None)


def _step_arms(v: str, env: Mapping[str, str]) -> str | None:
    """hidden= limits every call but the step's last, estimated= the calls the exposure estimate calls hidden
    (which needs its samples: AUTOCCL_EXPOSURE_EVERY unset, the library then sets 8, or at least 4); an arm
    caps their channels, sets their protocol, or both, and with +E gives the calls it leaves exposed (the
    step's last; an estimated arm's positions not called hidden) at least E channels (max: 64, as many as the
    communicator has)."""
    if v == "off":
        return None
    kinds: set[str] = set()
    for item in v.split(";"):
        kind, eq, arms_text = item.partition("=")
        if not eq or kind not in ("hidden", "estimated") or kind in kinds:
            return _STEP_ARMS_FORM
        arms = arms_text.split(",")
        matches = [_STEP_ARM.fullmatch(a) for a in arms]
        if not 1 <= len(arms) <= 4 or not all(matches):
            return _STEP_ARMS_FORM

        if any(_names_nothing(m, estimated=kind == "estimated") for m in matches):
            return _STEP_ARMS_FORM
        counts = [int(g) for m in matches if m for g in (m.group(1), m.group(4)) if g not in (None, "max")]
        # (channels, protocol, floor) as the library compares arms: "2" and "02" are one arm, "max" is 64
        limits = {
            (int(m.group(1) or 0), m.group(2) or m.group(3), _floor_channels(m.group(4)))
            for m in matches
            if m
        }
        if not all(1 <= c <= 64 for c in counts) or len(limits) != len(arms):
            return _STEP_ARMS_FORM
        kinds.add(kind)
    every = env.get("AUTOCCL_EXPOSURE_EVERY", "").strip(_C_SPACE)
    if "estimated" in kinds and re.fullmatch(r"[0-9]{1,20}", every) and int(every) == 0:
        return (
            "estimated= needs the exposure estimate's samples: AUTOCCL_EXPOSURE_EVERY unset (then 8) "
            "or >= 4, not 0"
        )
    return None


def _text(max_len: int) -> Check:
    def check(v: str, _env: Mapping[str, str]) -> str | None:
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in v):
            return "contains a control character"
        if len(v.encode("utf-8", "surrogateescape")) > max_len:
            return f"is longer than {max_len} characters"
        return None

    return check


def host_port_problem(v: str) -> str | None:
    """Why `v` is not host:port (the library's coord::parseHostPort), or None."""
    host, sep, port = v.rpartition(":")
    if not sep or not host:
        return "must be host:port"
    if host.startswith("[") and host.endswith("]") and len(host) > 2:
        host = host[1:-1]
    elif ":" in host:
        return "must be host:port (an IPv6 address in brackets: [::1]:port)"
    if len(host) > 255 or not re.fullmatch(r"[A-Za-z0-9._:%-]+", host):
        return "has a host name with a character other than letters, digits, '.', '-', '_'"
    if not re.fullmatch(r"[0-9]{1,12}", port) or not 1 <= int(port) <= 65535:
        return "needs a port in [1, 65535]"
    return None


def _host_port(v: str, _env: Mapping[str, str]) -> str | None:
    return host_port_problem(v)


def _faults(v: str, _env: Mapping[str, str]) -> str | None:
    for item in v.split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            return "must be key=value items (drop, dup, delay_ms, seed) separated by commas"
        if key in ("drop", "dup"):
            try:
                x = float(value)
            except ValueError:
                return f"needs {key} in [0, 1]"
            if not 0 <= x <= 1:
                return f"needs {key} in [0, 1]"
        elif key == "delay_ms":
            if not re.fullmatch(r"[0-9]+", value) or int(value) > 60000:
                return "needs delay_ms in [0, 60000]"
        elif key == "seed":
            if not re.fullmatch(r"[0-9]+", value) or int(value) >= 1 << 64:
                return "needs seed a non-negative integer"
        else:
            return f"has an unknown key {key!r} (drop, dup, delay_ms, seed)"
    return None


def parse_size(text: str) -> int | None:
    """integer[K|M|G] (binary units), as the library's parseSize; None if malformed."""
    t = text.strip(_C_SPACE)
    shift = {"K": 10, "M": 20, "G": 30}.get(t[-1:].upper(), 0)
    if shift:
        t = t[:-1]
    if not re.fullmatch(r"[0-9]{1,20}", t) or (int(t) << shift) >= 1 << 64:
        return None
    return int(t) << shift


def _norm(name: str) -> str:
    return name.strip(_C_SPACE).lower().replace("_", "")


def fixed_rules_problem(text: str, max_channels: int = 64) -> str | None:
    """Why AUTOCCL_FIXED / --fixed is not valid (the library's parseFixedRules), or None."""
    rules = [r.strip(_C_SPACE) for r in text.split(";") if r.strip(_C_SPACE)]
    if not rules:
        return "AUTOCCL_FIXED has no rule"
    for rule in rules:
        why = _rule_problem(rule, max_channels)
        if why:
            return f"AUTOCCL_FIXED rule {rule!r}: {why}"
    return None


def _rule_problem(rule: str, max_channels: int) -> str | None:
    lhs, sep, rhs = rule.partition(":")
    if not sep:
        return "missing ':'"
    colls, at, size_range = lhs.strip(_C_SPACE).partition("@")
    if at:
        lo_text, dash, hi_text = size_range.strip(_C_SPACE).partition("-")
        if not dash:
            return "size range needs 'lo-hi'"
        lo, hi = parse_size(lo_text), parse_size(hi_text)
        if lo is None or hi is None:
            return "bad size in range"
        if lo > hi:
            return "empty size range (lo > hi)"
    if colls.strip(_C_SPACE) != "*":
        for c in colls.split(","):
            if _norm(c) not in COLLS:
                return f"unknown collective {c.strip(_C_SPACE)!r}"
    try:
        parse_choice(rhs, max_channels)
    except SettingError as e:
        return str(e)
    return None


@dataclass(frozen=True)
class Choice:
    """What a fixed-mode rule forces: its right-hand side, `algo/proto[/channels][/chunk=size]`."""

    algo: str  # as ALGOS names it
    proto: str  # as PROTOS names it
    channels: int | None  # None: NCCL's count
    chunk: int | None  # bytes; None: NCCL's


def parse_choice(text: str, max_channels: int = 64) -> Choice:
    """A fixed-mode rule's right-hand side (the library's parseRule), e.g. an oracle rule `ring/ll/16`;
    raises SettingError saying why it is not one."""
    parts = text.split("/")
    if not 2 <= len(parts) <= 4:
        raise SettingError("expected algo/proto[/channels][/chunk=size]")
    algo, proto = _norm(parts[0]), _norm(parts[1])
    if algo not in ALGOS:
        raise SettingError(f"unknown algorithm {parts[0].strip(_C_SPACE)!r}")
    if proto not in PROTOS:
        raise SettingError(f"unknown protocol {parts[1].strip(_C_SPACE)!r}")
    channels: int | None = None
    chunk: int | None = None
    for i, part in enumerate(parts[2:], start=2):
        p = part.strip(_C_SPACE)
        if p.startswith("chunk="):
            if chunk is not None:
                raise SettingError("chunk given twice")
            chunk = parse_size(p[6:])
            if chunk is None or not MIN_CHUNK <= chunk <= MAX_CHUNK:
                raise SettingError("chunk must be a size in [4K, 16M]")
        else:
            if i != 2:
                raise SettingError("channels must come before chunk=")
            if not re.fullmatch(r"[0-9]{1,20}", p) or not 1 <= int(p) <= max_channels:
                raise SettingError(f"channels must be an integer in [1, {max_channels}]")
            channels = int(p)
    return Choice(algo, proto, channels, chunk)


def _fixed(v: str, env: Mapping[str, str]) -> str | None:
    max_ch = env.get("AUTOCCL_MAX_CHANNELS", "").strip(_C_SPACE)
    why = fixed_rules_problem(v, int(max_ch) if re.fullmatch(r"[0-9]{1,2}", max_ch) else 64)
    return why.removeprefix("AUTOCCL_FIXED ") if why else None


def _dir_of(path: str) -> Path:
    return Path(path).parent if "/" in path else Path(".")


def _table_path(v: str, _env: Mapping[str, str]) -> str | None:
    if Path(v).is_dir():
        return "is a directory, not a table file"
    if not _dir_of(v).is_dir():
        return f"names a directory that does not exist ({_dir_of(v)})"
    return None


def _trace_prefix(v: str, _env: Mapping[str, str]) -> str | None:
    if v.endswith("/"):
        return "must be a file prefix, not a directory (it ends with '/')"
    if not _dir_of(v).is_dir():
        return f"must be a file prefix in an existing directory ({_dir_of(v)} does not exist)"
    if not os.access(_dir_of(v), os.W_OK | os.X_OK):
        return f"must be a file prefix in a writable directory ({_dir_of(v)} is not writable)"
    return None


def _cache_dir(v: str, _env: Mapping[str, str]) -> str | None:
    p = Path(v.rstrip("/") or "/")
    if p.exists():
        return None if p.is_dir() else "must be a directory or a new one in an existing directory"
    return None if p.parent.is_dir() else "must be a directory or a new one in an existing directory"


def _lib_dir(v: str, _env: Mapping[str, str]) -> str | None:
    return None if Path(v).is_dir() else "is not a directory"


def _metrics_dir(v: str, _env: Mapping[str, str]) -> str | None:
    if not Path(v).is_dir():
        return "is not a directory"
    if not os.access(v, os.W_OK | os.X_OK):
        return "is not writable (the metrics files could not be written there)"
    return None


def _flag(v: str, _env: Mapping[str, str]) -> str | None:
    return None if v in ("0", "1", "true", "false", "yes", "no") else "must be 1, true, yes or 0, false, no"


def _nccl_version(v: str, _env: Mapping[str, str]) -> str | None:
    if not re.fullmatch(r"[0-9]{4,6}", v):
        return "must be NCCL's version code, e.g. 22809 for 2.28.9"
    return None


def _file(v: str, _env: Mapping[str, str]) -> str | None:
    return None if Path(v).is_file() else "is not a file"


PROFILER_SYMBOLS = (b"ncclProfiler_v7", b"ncclProfiler_v6", b"ncclProfiler_v5")  # those the library chains to


def _profiler_plugin(v: str, _env: Mapping[str, str]) -> str | None:
    """A shared library whose dynamic symbols name a profiler interface the library can chain to (an exported
    symbol's name is in the file's string table; reading it does not load the library)."""
    path = Path(v)
    if not path.is_file():
        return "is not a file"
    try:
        data = path.read_bytes()
    except OSError as e:
        return f"cannot be read ({e.strerror or e})"
    if not data.startswith(b"\x7fELF"):
        return "is not a shared library (no ELF header)"
    if not any(sym in data for sym in PROFILER_SYMBOLS):
        return "exports no ncclProfiler_v7, _v6 or _v5: not an NCCL profiler plugin the library can chain to"
    if _CHAIN_VARIABLE in data:  # a library that reads this variable itself is autoccl's, which refuses it
        return "is autoccl's own library, not another profiler plugin"
    return None


_CHAIN_VARIABLE = b"AUTOCCL_PROFILER_CHAIN"


VARIABLES: tuple[Variable, ...] = (
    Variable(
        "AUTOCCL_MODE",
        "library",
        "off, observe, fixed, table, online, manual",
        _one_of(*("off", "observe", "fixed", "table", "online", "manual")),
    ),
    Variable("AUTOCCL_FIXED", "library", "fixed-mode rules (grammar below)", _fixed),
    Variable("AUTOCCL_TABLE", "library", "a table file in an existing directory", _table_path),
    Variable(
        "AUTOCCL_CACHE_DIR", "library", "a directory, or a new one in an existing directory", _cache_dir
    ),
    Variable("AUTOCCL_TRACE", "library", "a file prefix in an existing directory", _trace_prefix),
    Variable(
        "AUTOCCL_PROFILER_CHAIN",
        "library",
        "an NCCL profiler plugin library exporting ncclProfiler_v7, _v6 or _v5",
        _profiler_plugin,
    ),
    Variable("AUTOCCL_METRICS_DIR", "library", "an existing writable directory", _metrics_dir),
    Variable("AUTOCCL_METRICS_INTERVAL_S", "library", "seconds in [0.1, 86400]", _seconds(0.1, 86400)),
    Variable("AUTOCCL_HW", "library", "text, at most 200 characters", _text(200)),
    Variable("AUTOCCL_MAX_CHANNELS", "library", "integer in [1, 64]", _int_range(1, 64)),
    Variable("AUTOCCL_NCCL_CHANNELS", "library", "integer in [1, 64]", _int_range(1, 64)),
    Variable(
        "AUTOCCL_MANUAL_CHANNELS",
        "library",
        "HIDDEN,EXPOSED: integers in [1, 64], EXPOSED may be max",
        _manual_channels,
    ),
    Variable("AUTOCCL_MEASURE_CALLS", "library", "integer in [0, 1000000]", _int_range(0, 1000000)),
    Variable("AUTOCCL_RECHECK_MS", "library", "integer in [0, 3600000]", _int_range(0, 3600000)),
    Variable("AUTOCCL_INPROC_SCORE", "library", "slowest, own", _one_of("slowest", "own")),
    Variable("AUTOCCL_XPROC_SCORE", "library", "shortest, own", _one_of("shortest", "own")),
    Variable("AUTOCCL_SCORE", "library", "auto, window, period", _one_of("auto", "window", "period")),
    Variable("AUTOCCL_CHUNK", "library", "auto, off", _one_of("auto", "off")),
    Variable("AUTOCCL_CLOCK", "library", "launch, kernel", _one_of("launch", "kernel")),
    Variable("AUTOCCL_MIN_TASK_US", "library", "integer in [0, 1000000]", _int_range(0, 1000000)),
    Variable("AUTOCCL_MIN_TASK_US_TCP", "library", "integer in [0, 1000000]", _int_range(0, 1000000)),
    Variable("AUTOCCL_MODEL_SMALL_PCT", "library", "integer in [0, 100]", _int_range(0, 100)),
    Variable("AUTOCCL_REGRET_PCT", "library", "integer in [0, 100]", _int_range(0, 100)),
    Variable("AUTOCCL_REGRET_EARN_PCT", "library", "integer in [0, 100]", _int_range(0, 100)),
    Variable("AUTOCCL_JOB_REGRET_PCT", "library", "integer in [0, 100]", _int_range(0, 100)),
    Variable("AUTOCCL_PROBE_KEEP_PCT", "library", "integer in [0, 1000]", _int_range(0, 1000)),
    Variable("AUTOCCL_SKIP_BEHIND_PCT", "library", "integer in [0, 10000]", _int_range(0, 10000)),
    Variable("AUTOCCL_VERIFY_WAIT", "library", "integer in [1, 1024]", _int_range(1, 1024)),
    Variable("AUTOCCL_ASK_AHEAD", "library", "integer in [0, 1024], or auto", _int_range_or("auto", 0, 1024)),
    Variable(
        "AUTOCCL_EXPOSURE_EVERY", "library", "0, or an integer in [4, 1000000]", _off_or_at_least(4, 1000000)
    ),
    Variable("AUTOCCL_PROBE_CALLS", "library", "integer in [1, 3]", _int_range(1, 3)),
    Variable("AUTOCCL_STEP_CALLS", "library", "integer in [1, 3]", _int_range(1, 3)),
    Variable("AUTOCCL_UNPROVEN_CALLS", "library", "integer in [0, 64]", _int_range(0, 64)),
    Variable("AUTOCCL_GUARD", "library", "on, off", _one_of("on", "off")),
    Variable("AUTOCCL_SPECULATE", "library", "on, off", _one_of("on", "off")),
    Variable("AUTOCCL_RECORDED_START", "library", "on, off", _one_of("on", "off")),
    Variable("AUTOCCL_ALLOWANCE_ONCE", "library", "on, off", _one_of("on", "off")),
    Variable("AUTOCCL_WAIT_REGRET", "library", "on, off", _one_of("on", "off")),
    Variable("AUTOCCL_ARM_SEARCH", "library", "on, off", _one_of("on", "off")),
    Variable(
        "AUTOCCL_STEP_ARMS",
        "library",
        "off, hidden=A1[,A2...], estimated=A1[,A2...], or both joined by ';': 1 to 4 distinct arms each, "
        "an arm an integer C in [1, 64], a protocol P (ll, ll128, simple) or C/P, each optionally followed "
        "by +E (the calls left exposed at least E channels, E in [1, 64] or max), or +E alone in hidden=",
        _step_arms,
    ),
    Variable("AUTOCCL_COORD_ADDR", "library", "host:port, port in [1, 65535]", _host_port),
    Variable("AUTOCCL_COORD_TOKEN", "library", "text, at most 4096 characters", _text(4096)),
    Variable("AUTOCCL_COORD_SECRET", "library", "text, at most 4096 characters", _text(4096)),
    Variable("AUTOCCL_RUN_ADDR", "library", "host:port (set by `autoccl run`)", _host_port),
    Variable("AUTOCCL_RUN_TOKEN", "library", "text (set by `autoccl run`)", _text(4096)),
    Variable("AUTOCCL_COORD_TIMEOUT_MS", "library", "integer in [100, 3600000]", _int_range(100, 3600000)),
    Variable("AUTOCCL_COORD_LINGER_MS", "library", "integer in [0, 600000]", _int_range(0, 600000)),
    Variable("AUTOCCL_COORD_FAULTS", "library", "drop=P,dup=P,delay_ms=N,seed=S (tests)", _faults),
    Variable("AUTOCCL_SEARCH_DEBUG", "library", "not blank: on (diagnostics in NCCL's log, INFO)", None),
    Variable("AUTOCCL_LIB_DIR", "cli", "a directory with the built artefacts", _lib_dir),
    Variable("AUTOCCL_SYNTH_LIB_DIR", "cli", "a directory with the synth extension", _lib_dir),
    # checked where it is used (`--nccl-channels auto`), with what to do instead
    Variable("AUTOCCL_NCCL_LIBRARY", "probe", "an NCCL library file", _file),
    Variable("AUTOCCL_EMU_KEEP", "cli", "1, true, yes or 0, false, no", _flag),
    Variable("AUTOCCL_TOPO_HOST", "cli", "a host name (used as given)", None),
    Variable("AUTOCCL_EMU_NCCL_VERSION", "emulator", "NCCL version code, e.g. 22809", _nccl_version),
    Variable("AUTOCCL_AGREEMENT_FULL", "tests", "1 or unset", None),
    Variable("AUTOCCL_AGREEMENT_RUNS", "tests", "integer", None),
    Variable("AUTOCCL_AGREEMENT_SEED", "tests", "integer", None),
    Variable("AUTOCCL_AGREEMENT_ONLY", "tests", "scenario name", None),
    Variable("AUTOCCL_CACHE_STRESS_RUNS", "tests", "integer", None),
    Variable("AUTOCCL_TEST_VERBOSE", "tests", "1 or unset", None),
    Variable("AUTOCCL_SANITIZER", "tests", "address, thread", None),
    Variable("AUTOCCL_JOBS", "tests", "integer (build parallelism of scripts/test.sh)", None),
)
BY_NAME = {v.name: v for v in VARIABLES}


def value_of(name: str, env: Mapping[str, str] | None = None) -> str:
    """The variable's value as the library reads it: ASCII spaces trimmed; unset or blank: ""."""
    return (os.environ if env is None else env).get(name, "").strip(_C_SPACE)


def problems(
    env: Mapping[str, str] | None = None, readers: tuple[str, ...] = ("library", "cli")
) -> list[str]:
    """One sentence per AUTOCCL_* variable of `env` (default: this process's) that is invalid: set to a
    value the library or the CLI would refuse. Unset and empty (blank) values mean "the default"."""
    e = os.environ if env is None else env
    out: list[str] = []
    for var in VARIABLES:
        raw = e.get(var.name)
        if raw is None or var.check is None or var.reader not in readers:
            continue
        value = raw.strip(_C_SPACE)
        if not value:
            continue
        why = var.check(value, e)
        if why:
            out.append(f"{var.name}={value!r} {why}")
    if e.get("AUTOCCL_MODE", "").strip(_C_SPACE) == "fixed" and not e.get("AUTOCCL_FIXED", "").strip(
        _C_SPACE
    ):
        out.append("AUTOCCL_MODE=fixed needs AUTOCCL_FIXED (rules)")
    return out


def unknown(env: Mapping[str, str] | None = None) -> list[str]:
    """One sentence per AUTOCCL_* name of `env` (default: this process's) that is no setting: a typo the
    library ignores without a word (AUTOCCL_SPECULATE misspelt), with the setting it is closest to."""
    e = os.environ if env is None else env
    out: list[str] = []
    for name in sorted(k for k in e if k.startswith("AUTOCCL_") and k not in BY_NAME):
        close = closest(name)
        out.append(f"{name} is no autoccl setting" + (f" (did you mean {close}?)" if close else ""))
    return out


def closest(name: str) -> str | None:
    """The setting an AUTOCCL_* name that is none was most likely meant to be, or None. Compared without the
    prefix every name shares, which alone would make AUTOCCL_HW a match for anything short."""
    tails = {v.removeprefix("AUTOCCL_"): v for v in BY_NAME}
    close = difflib.get_close_matches(name.removeprefix("AUTOCCL_"), list(tails), n=1)
    return tails[close[0]] if close else None


def check(env: Mapping[str, str] | None = None, readers: tuple[str, ...] = ("library", "cli")) -> None:
    """Raises SettingError with the first invalid AUTOCCL_* value of `env`."""
    found = problems(env, readers)
    if found:
        raise SettingError(found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
