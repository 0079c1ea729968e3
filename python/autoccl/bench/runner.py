"""Plans the launches of a benchmark, runs them one after another, and assembles the result document."""

from __future__ import annotations

import datetime
import json
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from autoccl._paths import ArtefactNotFound
from autoccl.bench import exposure_truth as ET
from autoccl.bench import modes as M
from autoccl.bench import results as R
from autoccl.bench import trace as T
from autoccl.bench.launch import LaunchError, Topology, run_launch
from autoccl.bench.spec import Load, SpecError, bus_factor, cell_key, format_size

Progress = Callable[[str, int, int], None]  # (launch label, cells done, cells total)


@dataclass
class CollOptions:
    colls: list[str]
    sizes: list[int]
    dtype: str
    loads: list[Load]
    modes: list[M.Mode]
    device: str
    backend: str
    warmup: int = 5
    iters: int = 20
    reps: int = 5
    check: bool = False
    online_warmup: int = 200
    online_channel_ceiling: int | None = None
    online_nccl_channels: int | None = None
    sweep_loads: list[Load] | None = None
    sweep_iters: int | None = None
    sweep_reps: int | None = None
    static_space: str = M.DEFAULT_STATIC_SPACE
    static_search: str = "oat"
    static_best_from: str | None = None
    oracle_channels: str = M.DEFAULT_ORACLE_CHANNELS
    oracle_protos: str = ",".join(M.ORACLE_PROTOS)
    oracle_algos: str | None = None
    # After the sweep, each load's per-cell picks run again in one fresh fixed-mode launch: the sweep's best
    # of many noisy launches is biased upwards; the re-measurement is what the oracle is compared by.
    oracle_remeasure: bool = True
    gemm_reps_from: str | None = None
    timeout_s: float = 600.0
    seed: int = 1234


@dataclass
class TrainOptions:
    preset: str
    parallel: list[str]
    modes: list[M.Mode]
    device: str
    backend: str
    iters: int = 200
    batch: int = 4
    seq: int = 1024
    dtype: str = "bf16"
    timeout_s: float = 600.0
    seed: int = 1234
    online_channel_ceiling: int | None = None
    online_nccl_channels: int | None = None
    manual_channels: str = "2,max"  # mode manual: AUTOCCL_MANUAL_CHANNELS
    step_arms: str = "hidden=2,8"  # mode online-arms: AUTOCCL_STEP_ARMS
    # torch.profiler over this many iterations before the last (train.ProfileWindow); 0: off
    torch_profile: int = 0
    # AUTOCCL_* settings of the online modes' launches (--online-setting), on top of the mode's own
    online_settings: dict[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Coordinator:
    """Shares small decisions of rank 0 (GEMM work per cell, the static-best winner) with the harness
    processes on other hosts (distributed runs only) through a TCPStore on MASTER_PORT."""

    def __init__(self, topo: Topology, timeout_s: float) -> None:
        self.topo = topo
        self.store: Any = None
        if topo.distributed:
            import torch.distributed as dist

            self.store = dist.TCPStore(
                topo.master_addr,
                topo.master_port,
                topo.world_size,
                topo.is_main,
                timeout=datetime.timedelta(seconds=timeout_s * 4),
            )

    def share(self, key: str, value: Any) -> Any:
        if self.store is None:
            return value
        if self.topo.is_main:
            self.store.set(key, json.dumps(value))
            return value
        return json.loads(self.store.get(key))


def _plugin_guard(fn: Callable[[], dict[str, str]], mode: str) -> dict[str, str]:
    try:
        return fn()
    except ArtefactNotFound as e:
        raise SpecError(
            f"mode {mode!r} needs the autoccl plugin, which is not built: {e}. "
            "Build it (`python3 -m pip install --no-build-isolation .`) or leave out online/oracle."
        ) from None


def _online_launch_env(
    folder: Path, channel_ceiling: int | None, nccl_channels: int | None
) -> tuple[str, dict[str, str]]:
    """(trace prefix, environment) of an online launch: its trace and a fresh cache under `folder`."""
    prefix = str(folder / "trace")
    online = partial(M.online_env, prefix, str(folder / "cache"), channel_ceiling, nccl_channels)
    env = _plugin_guard(online, "online")
    return prefix, env


def _base_spec(o: CollOptions, loads: list[Load]) -> dict[str, Any]:
    return {
        "kind": "coll",
        "device": o.device,
        "backend": o.backend,
        "colls": o.colls,
        "sizes": o.sizes,
        "dtype": o.dtype,
        "loads": [ld.to_json() for ld in loads],
        "warmup": o.warmup,
        "iters": o.iters,
        "reps": o.reps,
        "check": o.check,
        "seed": o.seed,
    }


def plan_coll(o: CollOptions, workdir: Path) -> list[M.Launch]:
    """Every launch known before any runs (the static-best re-measurement is added after its sweep)."""
    launches: list[M.Launch] = []
    load_names = [ld.name for ld in o.loads]
    sweep_loads = [ld.name for ld in (o.sweep_loads or o.loads)]
    for mode in o.modes:
        if mode.kind == "nccl":
            launches.append(M.Launch("nccl", "nccl", "measure", dict(M.SAFETY_ENV), loads=load_names))
        elif mode.kind == "static":
            env = M.static_env(dict(mode.settings))
            launches.append(
                M.Launch(
                    mode.name,
                    mode.name,
                    "measure",
                    env,
                    config=M.settings_label(dict(mode.settings)),
                    loads=load_names,
                )
            )
        elif mode.kind == "online":
            # One launch per load: the tuner starts from nothing and converges under that load.
            for ld in load_names:
                prefix, env = _online_launch_env(
                    workdir / f"online@{_safe(ld)}", o.online_channel_ceiling, o.online_nccl_channels
                )
                launches.append(
                    M.Launch(
                        "online",
                        f"online@{ld}",
                        "measure",
                        env,
                        loads=[ld],
                        online_warmup=o.online_warmup,
                        trace_prefix=prefix,
                    )
                )
        elif mode.kind in ("manual", "online-arms"):
            raise SpecError(
                f"mode {mode.kind} splits calls by their place in a training iteration; a collective "
                "repeated alone has one call per iteration: compare it with `autoccl bench train`"
            )
        elif mode.kind == "static-best":
            if o.static_best_from:
                continue  # re-measurement only, planned in run_coll
            space = M.parse_static_space(o.static_space)
            for cfg in M.static_configs(space, o.static_search):
                label = "static-best/" + M.settings_label(cfg)
                launches.append(
                    M.Launch(
                        "static-best",
                        label,
                        "sweep",
                        M.static_env(cfg),
                        config=M.settings_label(cfg),
                        loads=sweep_loads,
                        params={"settings": cfg},
                    )
                )
        elif mode.kind == "oracle":
            configs = M.oracle_configs(
                o.colls,
                M.parse_channels(o.oracle_channels),
                protos=[p.strip() for p in o.oracle_protos.split(",") if p.strip()],
                algos=[a.strip() for a in o.oracle_algos.split(",")] if o.oracle_algos else None,
            )
            if not configs:
                raise SpecError("oracle: none of the collectives is tuned by the plugin (all_to_all is not)")
            for i, cfg in enumerate(configs):
                env = _plugin_guard(partial(M.oracle_env, cfg), "oracle")
                launches.append(
                    M.Launch(
                        "oracle",
                        f"oracle/{i:03d}",
                        "sweep",
                        env,
                        config=M.fixed_rules(cfg),
                        loads=load_names,
                        params={"rules": cfg},
                    )
                )
    return launches


def _bind(progress: Progress | None, label: str) -> Callable[[int, int], None] | None:
    if progress is None:
        return None

    def cb(done: int, total: int) -> None:
        progress(label, done, total)

    return cb


def _run_recorded(
    topo: Topology,
    index: int,
    spec: dict[str, Any],
    ln: M.Launch,
    workdir: Path,
    *,
    timeout_s: float,
    progress: Progress | None,
    doc: dict[str, Any],
    entry: dict[str, Any],
    log: Callable[[str], None],
) -> tuple[bool, dict[str, Any] | None]:
    """Runs one launch and records its outcome in `entry` (status, time, rank 0's facts) and `doc` (host;
    on failure also the entry and the failure). Returns (ok, rank 0's result; None on other hosts)."""
    t0 = time.time()
    if ln.trace_prefix:  # the plugin opens PREFIX.<host>.<pid>.jsonl and creates no folders
        Path(ln.trace_prefix).parent.mkdir(parents=True, exist_ok=True)
    try:
        res = run_launch(
            topo,
            index,
            spec,
            ln.child_env(),
            workdir,
            timeout_s=timeout_s,
            on_progress=_bind(progress, ln.label),
        )
    except LaunchError as e:
        entry.update({"status": "failed", "error": str(e), "elapsed_s": time.time() - t0})
        doc["launches"].append(entry)
        doc["failures"].append({"launch": ln.label, "error": str(e)})
        log(f"launch {ln.label} failed: {R.error_summary(str(e))}")
        return False, None
    entry.update({"status": "ok", "elapsed_s": time.time() - t0})
    if res is not None:
        entry.update({"init_s": res.get("init_s"), "rank0_env": res.get("rank0_env")})
        if not doc["host"].get("torch"):
            doc["host"] = res.get("host", {})
    return True, res


def _safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_.@" else "_" for ch in text)


def estimate_coll_s(
    o: CollOptions, launches: list[M.Launch], world: int, busbw_gbs: float, startup_s: float
) -> float:
    """Rough duration: per launch a start-up cost plus every timed and warm-up iteration at `busbw_gbs`
    (+ 20 us latency); a loaded cell runs its collectives three times (alone, GEMM alone, together)."""
    total = 0.0
    for ln in launches:
        iters = (o.sweep_iters or o.iters) if ln.phase == "sweep" else o.iters
        reps = (o.sweep_reps or o.reps) if ln.phase == "sweep" else o.reps
        total += startup_s
        for ld in ln.loads:
            for c in o.colls:
                for s in o.sizes:
                    t = s * bus_factor(c, world) / (busbw_gbs * 1e9) + 20e-6
                    per = 3 if ld != "none" else 1
                    total += t * (
                        o.warmup + ln.online_warmup * (2 if ld != "none" else 1) + reps * iters * per
                    )
    return total


def _annotate(rows: list[dict[str, Any]], ln: M.Launch) -> None:
    for r in rows:
        r.update({"mode": ln.mode, "launch": ln.label, "phase": ln.phase, "config": ln.config})


def _launch_spec(o: CollOptions, ln: M.Launch, gemm_reps: dict[str, int]) -> dict[str, Any]:
    loads = [ld for ld in o.loads + (o.sweep_loads or []) if ld.name in ln.loads]
    loads = list({ld.name: ld for ld in loads}.values())
    spec = _base_spec(o, loads)
    if ln.phase == "sweep":
        spec["iters"] = o.sweep_iters or o.iters
        spec["reps"] = o.sweep_reps or o.reps
    spec["online_warmup"] = ln.online_warmup
    spec["record_warmup"] = ln.online_warmup > 0
    spec["gemm_reps"] = gemm_reps
    return spec


def _measure_from(o: CollOptions, ln: M.Launch) -> dict[str, int]:
    """Calls of each task the harness makes before its timed repetitions (see coll.measure_cell)."""
    loaded = any(ld != "none" for ld in ln.loads)
    before = o.warmup + ln.online_warmup + (1 if loaded and ln.online_warmup else 0)
    return {f"{c}/{s}": before for c in o.colls for s in o.sizes}


def gemm_reps_of(rows: list[dict[str, Any]]) -> dict[str, int]:
    return {
        cell_key(r["coll"], r["bytes"], r["load"]): int(r["gemm_reps"]) for r in rows if r.get("gemm_reps")
    }


Checkpoint = Callable[[dict[str, Any]], None]  # writes the document as it stands (after every launch)

# Settings that may differ between an interrupted run and its resumption: none of the measurement's.
_RESUME_FREE = ("distributed",)


def _resume_state(
    doc: dict[str, Any], resume_from: dict[str, Any] | None, coord: Coordinator
) -> tuple[set[str], dict[str, Any]]:
    """The launches of `resume_from` that finished (skipped now, their results copied), the same set on
    every host. An earlier document made with other settings is refused: its cells would not compare."""
    done: dict[str, Any] = {}
    if resume_from is not None:
        if resume_from.get("kind") != doc["kind"]:
            raise SpecError(f"--resume: the earlier result is a bench {resume_from.get('kind')} run")
        old, new = dict(resume_from.get("settings", {})), doc["settings"]
        # written before these options existed: the defaults then
        old.setdefault("oracle_remeasure", new.get("oracle_remeasure"))
        old.setdefault("manual_channels", new.get("manual_channels"))
        if "torch_profile" in new:  # a train run from before --torch-profile: none was taken
            old.setdefault("torch_profile", 0)
        if "online_settings" in new:  # before --online-setting: none
            old.setdefault("online_settings", {})
        differ = sorted(k for k in set(old) | set(new) if k not in _RESUME_FREE and old.get(k) != new.get(k))
        if differ:
            raise SpecError(
                "--resume: the earlier result was measured with other settings ("
                + ", ".join(f"{k}: {old.get(k)!r} then, {new.get(k)!r} now" for k in differ[:4])
                + "); run it with the same options or write to another prefix"
            )
        done = {e["label"]: e for e in resume_from.get("launches", []) if e.get("status") == "ok"}
        doc["resumed_from"] = resume_from.get("created")
        if resume_from.get("host"):
            doc["host"] = resume_from["host"]
    labels = set(coord.share("resume_done", sorted(done)))
    return labels, done


def _copy_done(doc: dict[str, Any], resume_from: dict[str, Any], entry: dict[str, Any]) -> None:
    label = entry["label"]
    doc["launches"].append(dict(entry, resumed=True))
    for key in ("rows", "warmup_traces", "iterations", "train"):
        doc.setdefault(key, [])
        doc[key].extend(x for x in resume_from.get(key, []) if x.get("launch") == label)


def run_coll(
    o: CollOptions,
    topo: Topology,
    workdir: Path,
    argv: list[str],
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
    resume_from: dict[str, Any] | None = None,
    checkpoint: Checkpoint | None = None,
) -> dict[str, Any]:
    """Runs the launches one after another. Ctrl-C or SIGTERM (as KeyboardInterrupt) stops the launch
    under way (its workers are terminated) and returns what was measured so far (`doc["status"]`
    "interrupted"); `resume_from`, an earlier document of the same settings, skips its finished launches."""
    launches = plan_coll(o, workdir)
    coord = Coordinator(topo, o.timeout_s)
    gemm_reps: dict[str, int] = {}
    if o.gemm_reps_from:
        gemm_reps = gemm_reps_of(R.load_doc(o.gemm_reps_from).get("rows", []))
    doc: dict[str, Any] = _doc_head("coll", argv, topo, o.device, o.backend)
    doc["settings"].update(
        {
            "colls": o.colls,
            "sizes": o.sizes,
            "dtype": o.dtype,
            "loads": [ld.to_json() for ld in o.loads],
            "modes": [m.name for m in o.modes],
            "warmup": o.warmup,
            "iters": o.iters,
            "reps": o.reps,
            "check": o.check,
            "online_warmup": o.online_warmup,
            "online_channel_ceiling": o.online_channel_ceiling,
            "online_nccl_channels": o.online_nccl_channels,
            "sweep_loads": [ld.name for ld in o.sweep_loads] if o.sweep_loads else None,
            "sweep_iters": o.sweep_iters,
            "sweep_reps": o.sweep_reps,
            "static_space": o.static_space,
            "static_search": o.static_search,
            "static_best_from": o.static_best_from,
            "oracle_channels": o.oracle_channels,
            "oracle_protos": o.oracle_protos,
            "oracle_algos": o.oracle_algos,
            "oracle_remeasure": o.oracle_remeasure,
            "gemm_reps_from": o.gemm_reps_from,
            "seed": o.seed,
        }
    )
    done_labels, done = _resume_state(doc, resume_from, coord)
    doc["status"] = "partial"
    try:
        _coll_launches(
            o,
            topo,
            workdir,
            launches,
            coord,
            doc,
            gemm_reps,
            done_labels,
            done,
            resume_from,
            progress,
            log,
            checkpoint,
        )
    except KeyboardInterrupt:
        doc["status"] = "interrupted"
        log(
            "interrupted: the launch under way was stopped; results of the finished launches are kept "
            "(continue with --resume)"
        )
        return doc
    doc["status"] = "complete"
    return doc


def _coll_launches(
    o: CollOptions,
    topo: Topology,
    workdir: Path,
    launches: list[M.Launch],
    coord: Coordinator,
    doc: dict[str, Any],
    gemm_reps: dict[str, int],
    done_labels: set[str],
    done: dict[str, Any],
    resume_from: dict[str, Any] | None,
    progress: Progress | None,
    log: Callable[[str], None],
    checkpoint: Checkpoint | None,
) -> None:
    failed: list[str] = []
    pending = list(launches)
    # Launches planned from what ran before them, each stage once the launches before it are done: the
    # static-best winner, then the oracle's per-cell picks.
    stages = ["static-best", "oracle"]
    index = 0
    while True:
        while not pending and stages:
            stage = stages.pop(0)
            if stage == "static-best" and any(m.kind == "static-best" for m in o.modes):
                pending.extend(_static_best_launches(o, doc, failed, coord, log))
            if stage == "oracle" and o.oracle_remeasure and any(m.kind == "oracle" for m in o.modes):
                pending.extend(_oracle_remeasure_launches(doc, coord, topo, log))
        if not pending:
            break
        ln = pending.pop(0)
        lw = workdir / f"{index:03d}-{_safe(ln.label)}"
        # A launch planned from what ran before it (static-best, the oracle's picks) is reused only when it
        # forces what it forces now (a sweep launch run again under --resume can change the picks).
        if ln.label in done_labels and done.get(ln.label, {}).get("config", ln.config) == ln.config:
            if resume_from is not None and ln.label in done:
                _copy_done(doc, resume_from, done[ln.label])
            if not gemm_reps:
                gemm_reps.update(
                    coord.share(f"gemm_reps/{index}", gemm_reps_of(doc["rows"]) if topo.is_main else {})
                )
            index += 1
            continue
        spec = _launch_spec(o, ln, gemm_reps)
        entry: dict[str, Any] = {
            "label": ln.label,
            "mode": ln.mode,
            "phase": ln.phase,
            "config": ln.config,
            "env": ln.env,
            "loads": ln.loads,
            "workdir": str(lw),
        }
        ok, res = _run_recorded(
            topo, index, spec, ln, lw, timeout_s=o.timeout_s, progress=progress, doc=doc, entry=entry, log=log
        )
        if not ok:
            failed.append(ln.label)
            index += 1
            if checkpoint:
                checkpoint(doc)
            continue
        if res is not None:
            rows = res["rows"]
            _annotate(rows, ln)
            doc["rows"].extend(rows)
            for tr in res.get("warmup_traces", []):
                tr.update({"mode": ln.mode, "launch": ln.label})
                doc["warmup_traces"].append(tr)
            if ln.trace_prefix:
                files = T.trace_files(ln.trace_prefix)
                conv = T.convergence(T.read_records(files)) if files else []
                T.annotate(conv, _measure_from(o, ln))
                entry["trace_files"] = [str(p) for p in files]
                entry["convergence"] = conv
        if not gemm_reps:
            gemm_reps.update(
                coord.share(f"gemm_reps/{index}", gemm_reps_of(doc["rows"]) if topo.is_main else {})
            )
        doc["launches"].append(entry)
        index += 1
        doc["gemm_reps"] = gemm_reps
        if checkpoint:
            checkpoint(doc)
    doc["gemm_reps"] = gemm_reps


def _static_best_launches(
    o: CollOptions, doc: dict[str, Any], failed: list[str], coord: Coordinator, log: Callable[[str], None]
) -> list[M.Launch]:
    """The static-best winner, re-measured in a fresh launch."""
    sel = coord.share("static_best", _static_best(o, doc, failed))
    doc["static_best"] = sel
    if not sel or not sel.get("selected"):
        log("static-best: no eligible setting (every sweep launch failed or lacked cells)")
        return []
    env = M.static_env(sel["settings"])
    loads = [ld.name for ld in o.loads]
    return [M.Launch("static-best", "static-best", "measure", env, config=sel["config"], loads=loads)]


def _oracle_remeasure_launches(
    doc: dict[str, Any], coord: Coordinator, topo: Topology, log: Callable[[str], None]
) -> list[M.Launch]:
    """Per load and communicator width, one fixed-mode launch forcing each cell's sweep pick, each rule scoped
    to its cell's size (the size NCCL hands the tuner is the cell's, nccl-tests' convention), on
    communicators as wide as those of the sweep launch the pick came from (NCCL's channel choice for a rule
    without a count, or for a collective left to NCCL, depends on it)."""
    picks: dict[str, list[dict[str, Any]]] = {}
    if topo.is_main:
        width = {e["label"]: e.get("env", {}).get("NCCL_MIN_CTAS") for e in doc["launches"]}
        for load, cells in R.oracle_picks(doc["rows"]).items():
            for c in cells:
                w = width.get(str(c["launch"]))
                c["width"] = int(w) if w else None
            picks[load] = cells
    picks = coord.share("oracle_picks", picks)
    doc["oracle_picks"] = picks
    if not picks:
        log("oracle: no cell has a valid sweep row to re-measure")
    out = []
    for load, cells in picks.items():
        for w in sorted({c["width"] for c in cells}, key=lambda x: -1 if x is None else x):
            group = [c for c in cells if c["width"] == w]
            env = _plugin_guard(partial(M.oracle_cells_env, group, w), "oracle")
            label = f"oracle@{load}" + (f"/w{w}" if w else "")
            config = env.get("AUTOCCL_FIXED", "")
            out.append(M.Launch("oracle", label, "measure", env, config=config, loads=[load]))
    return out


def _static_best(o: CollOptions, doc: dict[str, Any], failed: list[str]) -> dict[str, Any] | None:
    if o.static_best_from:
        src = R.load_doc(o.static_best_from)
        sel = src.get("static_best")
        if not sel or not sel.get("selected"):
            sel = R.static_best_choice(src.get("rows", []), [f["launch"] for f in src.get("failures", [])])
        if not sel or not sel.get("selected"):
            raise SpecError(f"{o.static_best_from} holds no static-best sweep with an eligible setting")
        settings = next(
            (ln.get("env") for ln in src.get("launches", []) if ln["label"] == sel["selected"]), None
        )
        out = dict(sel)
        out["settings"] = {k: v for k, v in (settings or {}).items() if k not in M.SAFETY_ENV}
        out["source"] = str(o.static_best_from)
        return out
    sel = R.static_best_choice(doc["rows"], failed)
    if sel and sel.get("selected"):
        env = next(ln["env"] for ln in doc["launches"] if ln["label"] == sel["selected"])
        sel["settings"] = {k: v for k, v in env.items() if k not in M.SAFETY_ENV}
        sel["source"] = "sweep"
    return sel


def _doc_head(kind: str, argv: list[str], topo: Topology, device: str, backend: str) -> dict[str, Any]:
    return {
        "schema": R.SCHEMA,
        "kind": kind,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(shlex.quote(a) for a in argv),
        "argv": argv,
        "cwd": os.getcwd(),
        "python_executable": sys.executable,
        "host": {},
        "settings": {
            "world_size": topo.world_size,
            "distributed": topo.distributed,
            "device": device,
            "backend": backend,
        },
        "launches": [],
        "rows": [],
        "warmup_traces": [],
        "failures": [],
        "static_best": None,
    }


def describe_plan(o: CollOptions, launches: list[M.Launch], world: int, busbw: float, startup: float) -> str:
    lines = [
        f"{len(launches)} launch(es) of {world} process(es); cells per launch: "
        f"{len(o.colls)} collective(s) x {len(o.sizes)} size(s) "
        f"({format_size(min(o.sizes))}..{format_size(max(o.sizes))}) x load(s)"
    ]
    for ln in launches:
        lines.append(
            f"  {ln.label:40s} {ln.phase:8s} loads={','.join(ln.loads)}"
            + (f" online_warmup={ln.online_warmup}" if ln.online_warmup else "")
        )
    if any(m.kind == "static-best" for m in o.modes):
        lines.append("  static-best                              measure  (the sweep's winner, re-measured)")
    extra = []
    if any(m.kind == "static-best" for m in o.modes):
        extra = [M.Launch("static-best", "static-best", "measure", {}, loads=[ld.name for ld in o.loads])]
    if o.oracle_remeasure and any(m.kind == "oracle" for m in o.modes):
        lines.append(
            "  oracle@LOAD                              measure  (the sweep's per-cell picks, re-measured: "
            "one launch per load and communicator width)"
        )
        extra += [M.Launch("oracle", f"oracle@{ld.name}", "measure", {}, loads=[ld.name]) for ld in o.loads]
    est = estimate_coll_s(o, launches + extra, world, busbw, startup)
    lines.append(
        f"estimated duration: {est / 60:.1f} min (at {busbw:g} GB/s busbw, {startup:g} s start-up a launch)"
    )
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------- train


def plan_train(o: TrainOptions, workdir: Path) -> list[M.Launch]:
    launches: list[M.Launch] = []
    for par in o.parallel:
        for mode in o.modes:
            if mode.kind == "nccl":
                env = dict(M.SAFETY_ENV)
                cfg = ""
            elif mode.kind == "static":
                env = M.static_env(dict(mode.settings))
                cfg = M.settings_label(dict(mode.settings))
            elif mode.kind in M.ONLINE_MODES:
                prefix, env = _online_launch_env(
                    workdir / f"{mode.kind}-{par}", o.online_channel_ceiling, o.online_nccl_channels
                )
                env.update(o.online_settings)
                cfg = M.settings_label(o.online_settings) if o.online_settings else ""
                if mode.kind == "online-arms":
                    env["AUTOCCL_STEP_ARMS"] = o.step_arms
                    cfg = ",".join(x for x in (cfg, f"AUTOCCL_STEP_ARMS={o.step_arms}") if x)
                launches.append(
                    M.Launch(
                        mode.kind,
                        f"{par}/{mode.kind}",
                        "measure",
                        env,
                        config=cfg,
                        trace_prefix=prefix,
                        params={"parallel": par},
                    )
                )
                continue
            elif mode.kind == M.TABLE_MODE:
                if not any(m.kind == "online" for m in o.modes):
                    raise SpecError(
                        "mode table starts from the table the round's online launch leaves: list online too"
                    )
                prefix = str(workdir / f"table-{par}" / "trace")
                table = partial(
                    M.table_env,
                    prefix,
                    str(workdir / f"online-{par}" / "cache"),
                    o.online_channel_ceiling,
                    o.online_nccl_channels,
                )
                launches.append(
                    M.Launch(
                        mode.kind,
                        f"{par}/{mode.kind}",
                        "measure",
                        _plugin_guard(table, "table"),
                        config="from online's table",
                        trace_prefix=prefix,
                        params={"parallel": par},
                    )
                )
                continue
            elif mode.kind == "manual":
                manual = partial(
                    M.manual_env, o.manual_channels, o.online_channel_ceiling, o.online_nccl_channels
                )
                env = _plugin_guard(manual, "manual")
                cfg = f"AUTOCCL_MANUAL_CHANNELS={o.manual_channels}"
            else:
                raise SpecError(f"bench train compares {', '.join(M.TRAIN_MODE_KINDS)}; not {mode.name}")
            launches.append(
                M.Launch(
                    mode.name, f"{par}/{mode.name}", "measure", env, config=cfg, params={"parallel": par}
                )
            )
    return _resilience_variants(o, launches)


def _resilience_variants(o: TrainOptions, launches: list[M.Launch]) -> list[M.Launch]:
    """`--resilience on|both` and fault injection: each launch once per (reducer, injection) variant,
    labelled e.g. ddp/nccl/resilient (injected) and ddp/nccl/sync/clean (the undelayed baseline)."""
    resilience = str(o.extra.get("resilience", "off"))
    injects = bool(o.extra.get("straggler") or o.extra.get("kill"))
    if resilience == "off" and not injects:
        return launches
    reducers = {"off": [False], "on": [True], "both": [False, True]}[resilience]
    injected = [True, False] if injects and o.extra.get("clean_baseline") else [injects]
    out = []
    for ln in launches:
        for inj in injected:
            for res in reducers:
                label = f"{ln.label}/{'resilient' if res else 'sync'}" + (
                    "/clean" if injects and not inj else ""
                )
                params = {**ln.params, "resilient": res, "inject": inj}
                out.append(
                    M.Launch(
                        ln.mode,
                        label,
                        ln.phase,
                        ln.env,
                        ln.config,
                        ln.loads,
                        ln.online_warmup,
                        ln.trace_prefix,
                        params,
                    )
                )
    return out


def profiled_iterations(settings: dict[str, Any]) -> tuple[int, int] | None:
    """[first, end) of the iterations `--torch-profile` ran under the profiler, its warm-up included
    (train.ProfileWindow); None without it."""
    return ET.profiled_iterations(int(settings.get("iters") or 0), int(settings.get("torch_profile") or 0))


def first_ms(times: list[float], leave_out: tuple[int, int] | None = None, first: int = 10) -> float:
    """Mean of the first `first` iterations (the search's start), without those in `leave_out` (the profiled
    ones: in a short run the profiler's window reaches them); NaN when none is left."""
    kept = [t for i, t in enumerate(times[:first]) if not (leave_out and leave_out[0] <= i < leave_out[1])]
    return sum(kept) / len(kept) if kept else math.nan


def steady_ms(times: list[float], leave_out: tuple[int, int] | None = None) -> float:
    """Median of the second half of the iterations (after any tuning phase), without those in `leave_out`
    ([first, end): the profiled ones, slower for the profiler's sake)."""
    half = len(times) // 2
    tail = sorted(
        t for i, t in enumerate(times) if i >= half and not (leave_out and leave_out[0] <= i < leave_out[1])
    )
    if not tail:
        return math.nan
    mid = len(tail) // 2
    return tail[mid] if len(tail) % 2 else (tail[mid - 1] + tail[mid]) / 2


def tuning_tradeoff(
    mode_ms: list[float],
    base_ms: list[float],
    search_end: int | None = None,
    leave_out: tuple[int, int] | None = None,
) -> dict[str, float]:
    """What online tuning costs and gains against the baseline launch (same model and parallelism), each
    iteration against the baseline's same iteration: gain = baseline steady - mode steady (ms/iter); the
    search window = the iterations before the search ended (`search_end`, from the launch's trace), or the
    first half where there is no trace (the half the steady level leaves out); cost = the mode's time over the
    baseline's in that window (s; negative where the mode was faster there); break-even = cost / gain
    iterations (0 when the window cost nothing, none when there is no gain).

    Against the baseline's same iterations, not the mode's own later level: a machine whose steps move by 15 %
    within a launch gave plain NCCL, measured against its own steady level, 3-8 s of such "cost" in 400
    iterations (benchmarks/results/h200x1/train-hosts), as much as the online launches it was meant to charge.
    The window's difference still holds the two launches' own difference (one launch pair cannot tell it
    apart: `autoccl bench train-pairs` over several pairs can)."""
    s_mode, s_base = steady_ms(mode_ms, leave_out), steady_ms(base_ms, leave_out)
    gain = s_base - s_mode
    n = min(len(mode_ms), len(base_ms))
    window = n // 2 if search_end is None else max(0, min(search_end, n))
    cost_ms = sum(mode_ms[:window]) - sum(base_ms[:window])
    if not gain > 0:
        break_even = math.nan
    else:
        break_even = max(cost_ms, 0.0) / gain
    return {
        "gain_ms": gain,
        "search_window_iters": float(window),
        "search_cost_s": cost_ms / 1e3,
        "break_even_iters": break_even,
    }


def run_train(
    o: TrainOptions,
    topo: Topology,
    workdir: Path,
    argv: list[str],
    progress: Progress | None = None,
    log: Callable[[str], None] = print,
    resume_from: dict[str, Any] | None = None,
    checkpoint: Checkpoint | None = None,
) -> dict[str, Any]:
    """As run_coll: interruptible, resumable, checkpointed after every launch."""
    launches = plan_train(o, workdir)
    doc = _doc_head("train", argv, topo, o.device, o.backend)
    doc["settings"].update(
        {
            "preset": o.preset,
            "parallel": o.parallel,
            "modes": [m.name for m in o.modes],
            "iters": o.iters,
            "batch": o.batch,
            "seq": o.seq,
            "dtype": o.dtype,
            "seed": o.seed,
            "online_channel_ceiling": o.online_channel_ceiling,
            "online_nccl_channels": o.online_nccl_channels,
            "manual_channels": o.manual_channels,
            "step_arms": o.step_arms,
            "torch_profile": o.torch_profile,
            "online_settings": o.online_settings,
            **o.extra,
        }
    )
    doc["iterations"] = []
    doc["train"] = []
    done_labels, done = _resume_state(doc, resume_from, Coordinator(topo, o.timeout_s))
    doc["status"] = "partial"
    try:
        _train_launches(
            o, topo, workdir, launches, doc, done_labels, done, resume_from, progress, log, checkpoint
        )
    except KeyboardInterrupt:
        doc["status"] = "interrupted"
        log(
            "interrupted: the launch under way was stopped; results of the finished launches are kept "
            "(continue with --resume)"
        )
    else:
        doc["status"] = "complete"
    annotate_online_rows(doc)
    return doc


# What an online train row keeps of each step guard verdict (the launch entry keeps the samples too).
GUARD_ROW_KEYS = (
    "comm",
    "at",
    "winner",
    "tuned_us",
    "tuned_samples",
    "nccl_us",
    "nccl_samples",
    "margin",
    "plan_gain_us",
    "unexplained",
    "voided_before",
    "cost_us",
    "regret_us",
)


def annotate_online_rows(doc: dict[str, Any]) -> None:
    """Each online train row against the plain NCCL launch of its parallel kind: the tuning trade-off, and
    from the launch's trace (its task convergence) when there is one the tuned window and how its recurring
    tasks ended (a fall-back to NCCL's choice, `trace.fell_back_to_nccl`)."""
    base = {it["parallel"]: it["iter_ms"] for it in doc["iterations"] if it["mode"] == "nccl"}
    conv = {e["label"]: e["convergence"] for e in doc["launches"] if "convergence" in e}
    guard = {e["label"]: e["guard"] for e in doc["launches"] if "guard" in e}
    profiled = profiled_iterations(doc.get("settings") or {})
    for row, it in zip(doc["train"], doc["iterations"], strict=True):
        if row["mode"] in M.TRACED_TRAIN_MODES and row["parallel"] in base:
            tasks = conv.get(row["launch"])  # None: the launch left no trace
            window = tuned_window(it["iter_ms"], base[row["parallel"]], tasks) if tasks is not None else {}
            row.update(
                tuning_tradeoff(it["iter_ms"], base[row["parallel"]], window.get("search_end_iter"), profiled)
            )
            row.update(window)
            if tasks is not None:
                row.update(T.fell_back_to_nccl(tasks, len(it["iter_ms"])) or {})
            if row["launch"] in guard:
                row["guard_verdicts"] = [guard_row(v) for v in guard[row["launch"]]]


def guard_row(v: dict[str, Any]) -> dict[str, Any]:
    """What an online train row keeps of one step guard verdict (an estimated arm's positions if it won)."""
    out = {k: v.get(k) for k in GUARD_ROW_KEYS}
    if "winner_positions" in v:
        out["winner_positions"] = v["winner_positions"]
    return out


def tuned_window(mode_ms: list[float], base_ms: list[float], conv: list[dict[str, Any]]) -> dict[str, Any]:
    """The step once the search has ended (from the launch's trace): the median of the online launch's
    iterations from the first stretch of max(30, iters / 10) iterations without a decision change on
    (longer than the pins usually hold before the step guard's first round), against the baseline's
    median over the same iterations. The steady column (second half) says nothing about tuning when
    the search ran into it; `tuned_ms` is None when the run never settled."""
    n = len(mode_ms)
    settled = max(30, n // 10)
    end = T.search_end_iteration(conv, n, settled)
    out: dict[str, Any] = {
        "search_end_iter": end,
        "search_in_steady_window": end is not None and end > n // 2,
    }
    tail, base_tail = mode_ms[end or 0 :], base_ms[end or 0 : n]
    if end is None or len(tail) < settled or not base_tail:
        out.update({"tuned_ms": None, "plain_same_iters_ms": None})
    else:
        out.update({"tuned_ms": statistics.median(tail), "plain_same_iters_ms": statistics.median(base_tail)})
    return out


def _exposure_truth_report(
    entry: dict[str, Any], folder: Path, label: str, records: list[dict[str, Any]]
) -> None:
    """A launch with both a profiler truth (--torch-profile) and the plugin's exposure records gets
    exposure-truth.md in its folder: the estimate against the truth, per communicator."""
    truth = entry.get("exposure_truth")
    exposures = ET.exposure_records(records)
    if not truth or truth.get("reason") or not exposures:
        return
    text, comparisons = ET.launch_report(folder, label, truth, exposures)
    path = folder / "exposure-truth.md"
    path.write_text(text)
    entry["exposure_truth_md"] = str(path)
    entry["exposure_compare"] = [c.to_json() for c in comparisons]


def _train_launches(
    o: TrainOptions,
    topo: Topology,
    workdir: Path,
    launches: list[M.Launch],
    doc: dict[str, Any],
    done_labels: set[str],
    done: dict[str, Any],
    resume_from: dict[str, Any] | None,
    progress: Progress | None,
    log: Callable[[str], None],
    checkpoint: Checkpoint | None,
) -> None:
    for index, ln in enumerate(launches):
        lw = workdir / f"{index:03d}-{_safe(ln.label)}"
        if ln.label in done_labels:
            if resume_from is not None and ln.label in done:
                _copy_done(doc, resume_from, done[ln.label])
            continue
        spec = {
            "kind": "train",
            "device": o.device,
            "backend": o.backend,
            "preset": o.preset,
            "parallel": ln.params["parallel"],
            "iters": o.iters,
            "batch": o.batch,
            "seq": o.seq,
            "dtype": o.dtype,
            "seed": o.seed,
            "torch_profile": o.torch_profile,
            "launch": ln.label,  # names the launch's files (exposure_truth.profile_name)
            **o.extra,
            "resilient": bool(ln.params.get("resilient")),
            "inject": bool(ln.params.get("inject")),
        }
        entry: dict[str, Any] = {
            "label": ln.label,
            "mode": ln.mode,
            "phase": ln.phase,
            "config": ln.config,
            "env": ln.env,
            "workdir": str(lw),
            "parallel": ln.params["parallel"],
        }
        ok, res = _run_recorded(
            topo, index, spec, ln, lw, timeout_s=o.timeout_s, progress=progress, doc=doc, entry=entry, log=log
        )
        if not ok:
            if checkpoint:
                checkpoint(doc)
            continue
        if res is not None:
            it = {
                "parallel": ln.params["parallel"],
                "mode": ln.mode,
                "launch": ln.label,
                "iter_ms": res["iter_ms"],
            }
            doc["iterations"].append(it)
            tokens = o.batch * o.seq * topo.world_size
            profiled = profiled_iterations(doc["settings"])
            st = steady_ms(res["iter_ms"], profiled)
            doc["train"].append(
                {
                    "parallel": ln.params["parallel"],
                    "mode": ln.mode,
                    "launch": ln.label,
                    "params": res.get("params"),
                    "steady_ms": st,
                    "tokens_per_s": tokens / (st / 1e3),
                    "first10_ms": first_ms(res["iter_ms"], profiled),
                    "max_mem_gib": res.get("max_mem_gib"),
                    "loss_first": res.get("loss_first"),
                    "loss_last": res.get("loss_last"),
                }
            )
            if "mean_step_ms" in res:  # a resilience comparison launch
                it["loss"] = res.get("loss")
                doc["train"][-1].update(
                    {
                        "resilient": bool(ln.params.get("resilient")),
                        "injected": bool(ln.params.get("inject")),
                        "mean_step_ms": res["mean_step_ms"],
                        "eval_loss": res.get("eval_loss"),
                        "loss_floor": res.get("loss_floor"),
                        "weights_identical": res.get("weights_identical"),
                        "live_ranks": res.get("live_ranks"),
                        "resilience": res.get("resilience"),
                        "straggler_plan": res.get("straggler_plan"),
                        "records": res.get("records"),
                    }
                )
            if "exposure_truth" in res:
                entry["exposure_truth"] = res["exposure_truth"]
            if ln.trace_prefix:
                files = T.trace_files(ln.trace_prefix)
                records = T.read_records(files) if files else []
                entry["trace_files"] = [str(p) for p in files]
                entry["convergence"] = T.convergence(records)
                entry["guard"] = T.guard_verdicts(records)
                _exposure_truth_report(entry, lw, ln.label, records)
        doc["launches"].append(entry)
        if checkpoint:
            checkpoint(doc)
