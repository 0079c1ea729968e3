"""Benchmark modes and the launches (process environments) they expand to. Pure: no torch.

A *mode* is what the user compares (`nccl`, `static:VAR=VAL,...`, `static-best`, `online`, `oracle`);
a *launch* is one set of processes with one environment. `nccl`, `static:` and `online` are one launch
each; `static-best` is a sweep of global NCCL settings (one launch per setting) followed by a fresh
re-measurement of the winner; `oracle` is one launch per per-collective (algo, proto, channels) rule of
the plugin's `fixed` mode, and the best launch is picked per cell.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from autoccl.bench.spec import PLUGIN_COLL, SpecError
from autoccl.settings import SettingError, parse_choice
from autoccl.tuner_env import SAFETY_ENV, plain_nccl_env, plugin_env

MODE_KINDS = ("nccl", "static", "static-best", "online", "online-arms", "oracle", "manual")  # bench coll
PLUGIN_MODES = ("online", "online-arms", "oracle", "manual", "table")
ONLINE_MODES = ("online", "online-arms")  # the tuner online; online-arms adds the step guard's channel arms
# bench train's second start: table mode from the table the same round's online launch of the same parallel
# kind left (the step guard judging it, AUTOCCL_GUARD on)
TABLE_MODE = "table"
# bench train's plugin modes: run on the communicators online mode makes; --pairs sets each beside nccl
TUNED_TRAIN_MODES = (*ONLINE_MODES, "manual", TABLE_MODE)
TRAIN_MODE_KINDS = ("nccl", "static", *TUNED_TRAIN_MODES)  # what bench train launches
# ... whose launches leave the plugin's trace (task convergence, the step guard's verdicts)
TRACED_TRAIN_MODES = (*ONLINE_MODES, TABLE_MODE)

# The global NCCL knobs of the static-best sweep (AFNFA-style baseline). `CTAS` is a pseudo knob that
# sets NCCL_MIN_CTAS and NCCL_MAX_CTAS to the same value.
DEFAULT_STATIC_SPACE = (
    "NCCL_PROTO=LL,LL128,Simple;NCCL_ALGO=Ring,Tree;CTAS=8,16,32,64;"
    "NCCL_NTHREADS=256,512;NCCL_BUFFSIZE=1048576,16777216"
)

# The tuner's per-task space, as the plugin's fixed mode can force it. NVLS/NVLSTree need NVLink
# multicast (kept off), CollNet needs a CollNet network, PAT runs only with one GPU per node.
ORACLE_ALGOS = {
    "all_reduce": ("ring", "tree"),
    "all_gather": ("ring",),
    "reduce_scatter": ("ring",),
    "broadcast": ("ring",),
    "reduce": ("ring",),
}
ORACLE_PROTOS = ("ll", "ll128", "simple")
DEFAULT_ORACLE_CHANNELS = "auto,8,16,32,64"

_VAR_RE = re.compile(r"[A-Z_][A-Z0-9_]*")


@dataclass(frozen=True)
class Mode:
    kind: str  # one of MODE_KINDS
    settings: tuple[tuple[str, str], ...] = ()  # static:VAR=VAL,...

    @property
    def name(self) -> str:
        if self.kind == "static":
            return "static:" + ",".join(f"{k}={v}" for k, v in self.settings)
        return self.kind

    @property
    def needs_plugin(self) -> bool:
        return self.kind in PLUGIN_MODES


def _parse_setting(text: str, where: str) -> tuple[str, str]:
    if "=" not in text:
        raise SpecError(f"bad setting {text!r} in {where!r}: expected VAR=VALUE")
    var, val = (s.strip() for s in text.split("=", 1))
    if not _VAR_RE.fullmatch(var):
        raise SpecError(f"bad variable name {var!r} in {where!r}")
    if var in SAFETY_ENV and val != SAFETY_ENV[var]:
        raise SpecError(
            f"{var} is kept at {SAFETY_ENV[var]} in every launch (NVLink multicast must stay off)"
        )
    if var.startswith("AUTOCCL_") or var in ("NCCL_TUNER_PLUGIN", "NCCL_PROFILER_PLUGIN"):
        raise SpecError(f"{var} belongs to the plugin modes (online, oracle), not to static settings")
    return var, val


def parse_modes(
    texts: Iterable[str], baseline_first: bool = True, kinds: Sequence[str] = MODE_KINDS
) -> list[Mode]:
    """`nccl,static:NCCL_PROTO=LL128,NCCL_ALGO=Ring,static-best,online,oracle`: a `VAR=VAL` item after a
    `static:` item belongs to it. May be given several times. baseline_first puts plain NCCL first (what
    `bench coll` needs); otherwise the modes keep the order given (`bench train` launches them in it, so
    that launch pairs can alternate which mode goes first). `kinds`: the modes the command runs (any other is
    refused here)."""
    expected = ", ".join("static:VAR=VAL[,VAR=VAL...]" if k == "static" else k for k in kinds)
    modes: list[Mode] = []
    for text in texts:
        current: list[tuple[str, str]] | None = None
        for raw in (s.strip() for s in text.split(",")):
            if not raw:
                continue
            low = raw.lower()
            if low.startswith("static:") and "static" in kinds:
                current = [_parse_setting(raw[len("static:") :], raw)]
                modes.append(Mode("static", tuple(current)))  # VAR=VAL items after it extend it below
                continue
            if "=" in raw and current is not None:
                current.append(_parse_setting(raw, raw))
                modes[-1] = Mode("static", tuple(current))
                continue
            current = None
            if low not in kinds or low == "static":
                raise SpecError(f"unknown mode {raw!r}; expected {expected}")
            modes.append(Mode(low))
    unique: list[Mode] = []
    for m in modes:
        if m not in unique:
            unique.append(m)
    if not unique:
        raise SpecError("no modes given")
    if baseline_first:
        # The first launch fixes the GEMM work of every loaded cell; the plain baseline goes first.
        unique.sort(key=lambda m: 0 if m.kind == "nccl" else 1)
    return unique


def round_order(modes: Sequence[Mode], reverse: bool) -> list[Mode]:
    """The order a `bench train` round launches `modes` in: as given, or reversed (every second round, so
    that a machine that warms or slows over a round weighs on both sides), with table mode kept right after
    the online launch whose table it starts from."""
    order = list(reversed(modes)) if reverse else list(modes)
    tables = [m for m in order if m.kind == TABLE_MODE]
    rest = [m for m in order if m.kind != TABLE_MODE]
    online = next((i for i, m in enumerate(rest) if m.kind == "online"), None)
    if online is None:
        return order
    return rest[: online + 1] + tables + rest[online + 1 :]


def table_env(
    trace_prefix: str,
    cache_dir: str,
    channel_ceiling: int | None = None,
    nccl_channels: int | None = None,
) -> dict[str, str]:
    """Table mode from `cache_dir` (another launch's), on the communicators online mode makes (its pins'
    channel counts stay reachable), traced."""
    return online_env(trace_prefix, cache_dir, channel_ceiling, nccl_channels, mode="table")


def parse_static_space(text: str) -> list[tuple[str, list[str]]]:
    """`VAR=v1,v2;VAR2=v3` -> [(VAR, [v1, v2]), (VAR2, [v3])]."""
    out: list[tuple[str, list[str]]] = []
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        if "=" not in part:
            raise SpecError(f"bad static space item {part!r}: expected VAR=v1,v2,...")
        var, vals = part.split("=", 1)
        var = var.strip()
        if var != "CTAS":
            _parse_setting(f"{var}=x", part)
        values = [v.strip() for v in vals.split(",") if v.strip()]
        if not values:
            raise SpecError(f"static space item {part!r} has no values")
        out.append((var, values))
    if not out:
        raise SpecError("empty static space")
    return out


def _knob_env(var: str, value: str) -> dict[str, str]:
    if var == "CTAS":
        return {"NCCL_MIN_CTAS": value, "NCCL_MAX_CTAS": value}
    return {var: value}


def static_configs(space: Sequence[tuple[str, Sequence[str]]], search: str) -> list[dict[str, str]]:
    """The settings of a static sweep: `oat` = NCCL's default plus one knob changed at a time;
    `grid` = every combination (each knob also at its default)."""
    if search == "oat":
        configs: list[dict[str, str]] = [{}]
        for var, values in space:
            configs.extend(_knob_env(var, v) for v in values)
        return configs
    if search == "grid":
        axes = [[None, *values] for _, values in space]
        configs = []
        for combo in itertools.product(*axes):
            env: dict[str, str] = {}
            for (var, _), v in zip(space, combo, strict=True):
                if v is not None:
                    env.update(_knob_env(var, v))
            configs.append(env)
        return configs
    raise SpecError(f"unknown static search {search!r}; expected oat or grid")


def settings_label(env: Mapping[str, str]) -> str:
    if not env:
        return "default"
    items = dict(env)
    if items.get("NCCL_MIN_CTAS") is not None and items.get("NCCL_MIN_CTAS") == items.get("NCCL_MAX_CTAS"):
        ctas = items.pop("NCCL_MIN_CTAS")
        items.pop("NCCL_MAX_CTAS")
        items["CTAS"] = ctas
    return ",".join(f"{k}={v}" for k, v in sorted(items.items()))


def parse_channels(text: str) -> list[int | None]:
    out: list[int | None] = []
    for item in (s.strip().lower() for s in text.split(",") if s.strip()):
        if item == "auto":
            out.append(None)
            continue
        if not item.isdigit() or int(item) <= 0:
            raise SpecError(f"bad channel count {item!r}: expected a positive integer or auto")
        out.append(int(item))
    if not out:
        raise SpecError("no channel counts given")
    return out


def oracle_rule(algo: str, proto: str, channels: int | None) -> str:
    return f"{algo}/{proto}" + (f"/{channels}" if channels else "")


def oracle_configs(
    colls: Sequence[str],
    channels: Sequence[int | None],
    protos: Sequence[str] = ORACLE_PROTOS,
    algos: Sequence[str] | None = None,
) -> list[dict[str, str]]:
    """One launch per index into every collective's own list of (algo, proto, channels) choices, so the
    number of launches is that of the largest list (all_reduce: ring and tree). Each entry maps the
    collective to the rule forced for it in that launch."""
    per_coll: dict[str, list[str]] = {}
    for c in colls:
        if c not in PLUGIN_COLL:
            continue  # all_to_all: point-to-point in NCCL, not tuned by the plugin
        coll_algos = [a for a in ORACLE_ALGOS[c] if algos is None or a in algos]
        per_coll[c] = [oracle_rule(a, p, ch) for a in coll_algos for p in protos for ch in channels]
    if not any(per_coll.values()):
        return []
    n = max(len(v) for v in per_coll.values())
    return [{c: rules[i] for c, rules in per_coll.items() if i < len(rules)} for i in range(n)]


def fixed_rules(config: Mapping[str, str]) -> str:
    """{"all_gather": "ring/ll/8"} -> `allgather:ring/ll/8` (plugin fixed-mode grammar)."""
    return ";".join(f"{PLUGIN_COLL[c]}:{rule}" for c, rule in config.items())


@dataclass
class Launch:
    """One set of processes with one environment."""

    mode: str  # the mode's name as the user gave it
    label: str  # unique, filesystem-safe-ish name of this launch
    phase: str  # measure | sweep
    env: dict[str, str]  # what this launch sets on top of plain NCCL (SAFETY_ENV included)
    config: str = ""  # the setting under test (sweeps), e.g. "NCCL_PROTO=LL128" or "allgather:ring/ll/8"
    loads: list[str] = field(default_factory=list)  # load names measured in this launch
    online_warmup: int = 0
    trace_prefix: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def child_env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        env = plain_nccl_env(base)
        env.update(self.env)
        return env


def static_env(settings: Mapping[str, str]) -> dict[str, str]:
    env = dict(SAFETY_ENV)
    env.update(settings)
    return env


def ceiling_env(channels: int) -> dict[str, str]:
    """Communicators created with exactly `channels` channels: NCCL caps every channel request (the
    tuner's too) at the communicator's count, 24 on 4 x H200 by default."""
    return {"NCCL_MIN_CTAS": str(channels), "NCCL_MAX_CTAS": str(channels)}


def online_env(
    trace_prefix: str,
    cache_dir: str,
    channel_ceiling: int | None = None,
    nccl_channels: int | None = None,
    mode: str = "online",
) -> dict[str, str]:
    """The online tuner (or another `mode` on the same communicators); with `channel_ceiling` the
    communicators get that many channels so the tuner can use more than NCCL's default (which then also
    changes NCCL's own choice for untuned calls, unless `nccl_channels` caps those calls at a plain
    communicator's count)."""
    return plugin_env(
        mode,
        trace=trace_prefix,
        cache_dir=cache_dir,
        max_channels=channel_ceiling,
        nccl_channels=nccl_channels,
        extra=ceiling_env(channel_ceiling) if channel_ceiling is not None else None,
    )


def manual_env(
    channels: str, channel_ceiling: int | None = None, nccl_channels: int | None = None
) -> dict[str, str]:
    """The resource-sharing study's manual policy (plugin mode `manual`): `channels` = HIDDEN,EXPOSED for
    the calls an iteration hides and its last call; with `channel_ceiling` the communicators get that many
    channels, which `max` then means."""
    extra = {"AUTOCCL_MANUAL_CHANNELS": channels}
    if channel_ceiling is not None:
        extra.update(ceiling_env(channel_ceiling))
    return plugin_env("manual", max_channels=channel_ceiling, nccl_channels=nccl_channels, extra=extra)


def rule_channels(rule: str) -> int | None:
    """`ring/ll/16` -> 16; `ring/ll` (NCCL's channel count), or not a rule the plugin takes -> None."""
    try:
        return parse_choice(rule).channels
    except SettingError:
        return None


def oracle_env(config: Mapping[str, str]) -> dict[str, str]:
    """Fixed mode forcing `config`. A launch forcing explicit channel counts creates its communicators
    with the largest of them, else NCCL would cap 32 or 64 at its default count (24 on 4 x H200) and the
    oracle would measure the same point under several names; `auto` launches keep NCCL's communicator."""
    counts = [c for c in (rule_channels(r) for r in config.values()) if c is not None]
    if not counts:
        return plugin_env("fixed", fixed=fixed_rules(config))
    return plugin_env("fixed", fixed=fixed_rules(config), extra=ceiling_env(max(counts)))


def oracle_cells_env(cells: Sequence[Mapping[str, Any]], width: int | None = None) -> dict[str, str]:
    """Fixed mode forcing each cell's own rule (`coll`, `bytes`, `rule` as `ring/ll/16`), scoped to the
    cell's size, on communicators of `width` channels (None: NCCL's own count), as in the sweep launch the
    picks came from. A cell whose rule is None keeps NCCL's choice (its pick came from a launch that left
    the collective alone); with no rule at all, observe (NCCL's choice, timed)."""
    extra = ceiling_env(width) if width else None
    rules = [
        f"{PLUGIN_COLL[c['coll']]}@{c['bytes']}-{c['bytes']}:{c['rule']}" for c in cells if c.get("rule")
    ]
    if not rules:
        return plugin_env("observe", extra=extra)
    return plugin_env("fixed", fixed=";".join(rules), extra=extra)


def geomean(values: Iterable[float]) -> float:
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return math.nan
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
