"""`autoccl doctor`: is the plugin picked up, and will it work with this NCCL? Each check looks at one thing a
job under `autoccl run` (or `autoccl env`) depends on, without starting the job: the plugin library, the NCCL
the job loads, the CTA (channel) controls that NCCL and PyTorch offer the application, the AUTOCCL_* settings,
the GPUs, the NVLink multicast variables, the table cache, and where a GPU and NCCL are here, one
communicator created with the plugin loaded (in a child process, mode off), whose NCCL log says which tuner
and profiler interfaces NCCL took from the library.

Every check ends ok, warn, fail or skipped, with one line of detail and, for warn and fail, what to do.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoccl import __version__, cta_controls, nccl_probe, settings, tables
from autoccl._paths import ArtefactNotFound, plugin_path
from autoccl.folders import unwritable_folder
from autoccl.tuner_env import MODES, SAFETY_ENV, plain_nccl_env, plugin_env

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)
SCHEMA_VERSION = 1

# The plugin structs the library exports, by interface version (csrc/nccl/exports.map; tuner.cc, profiler.cc).
TUNER_SYMBOLS = {5: "ncclTunerPlugin_v5", 6: "ncclTunerPlugin_v6"}
PROFILER_SYMBOLS = {5: "ncclProfiler_v5", 6: "ncclProfiler_v6", 7: "ncclProfiler_v7"}

# The first NCCL version (code) that looks for each interface version; NCCL takes the newest it knows that the
# library exports, and falls back to older ones. From NCCL's src/plugin/tuner.cc and src/plugin/profiler.cc,
# which try getNcclTuner_vN / getNcclProfiler_vN newest first: at tag v2.28.3-1 tuner v5 and profiler v5,
# v2.29.2-1 profiler v6, v2.30.3-1 tuner v6; profiler v7 from NCCL 2.31 (csrc/nccl/abi/profiler_v7.h). As
# measured: 2.28.9 took tuner v5 / profiler v5, 2.30.7 v6 / v6
# (benchmarks/results/h200x2/nccl-2.30-chunk-size), 2.32.3 tuner v6 / profiler v7
# (benchmarks/results/h200x1/nccl-2.32; 2.32's tuner v7 is not exported yet, docs/roadmap.md).
TUNER_SINCE = {6: 23003, 5: 22803}
PROFILER_SINCE = {7: 23100, 6: 22900, 5: 22803}
# csrc/nccl/plugin.cc kMinNcclVersion: below it the library behaves as no tuner. The newest NCCL measured with
# the plugin is 2.32.x (README).
MIN_NCCL = 22803
NEWEST_TESTED_MINOR = (2, 32)

PROC_GPUS = Path("/proc/driver/nvidia/gpus")  # the NVIDIA driver's GPUs, as the library reads them


@dataclass
class Check:
    """One line of the report. `name` is stable (the JSON's key); `fix` says what to do (warn and fail)."""

    name: str
    title: str
    status: str
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "status": self.status,
            "detail": self.detail,
            "fix": self.fix,
            "data": self.data,
        }


@dataclass(frozen=True)
class DoctorOptions:
    mode: str | None = None  # as `autoccl run --mode` (None: AUTOCCL_MODE where valid, else online)
    cache_dir: str | None = None
    gpu_check: bool = True
    gpus: int | None = None  # the check communicator's GPUs (None: every visible one)
    timeout_s: float = 120.0


@dataclass(frozen=True)
class PluginInfo:
    path: str
    name: str | None
    tuner: tuple[int, ...]  # interface versions exported
    profiler: tuple[int, ...]


@dataclass(frozen=True)
class NcclInfo:
    library: str  # as found (a path, or the name the dynamic loader searches)
    path: str | None  # the file loaded
    version: int


@dataclass(frozen=True)
class Gpus:
    models: list[str] | None  # the driver's, one per GPU; None: no NVIDIA driver
    torch: str | None = None  # torch's version where asked
    torch_count: int | None = None

    @property
    def count(self) -> int:
        return len(self.models or [])


def taken_interface(nccl_version: int, since: Mapping[int, int], exported: Iterable[int]) -> int | None:
    """The interface version NCCL `nccl_version` takes from a library exporting `exported`: the newest it
    knows of those (None: none)."""
    have = set(exported)
    for version in sorted(since, reverse=True):
        if nccl_version >= since[version] and version in have:
            return version
    return None


def job_mode(options: DoctorOptions, env: Mapping[str, str]) -> str:
    if options.mode:
        return options.mode
    exported = settings.value_of("AUTOCCL_MODE", env)
    return exported if exported in MODES else "online"


# ------------------------------------------------------------------------------------------------- 1. plugin


def check_plugin() -> tuple[Check, PluginInfo | None]:
    """The library `autoccl env|run` would hand NCCL: found, loadable, and its plugin structs."""
    title = "plugin library"
    try:
        path = plugin_path()
    except ArtefactNotFound as e:
        return Check(
            "plugin",
            title,
            FAIL,
            str(e),
            "build the library (benchmarks/gpu/setup.sh, or `pip install .`) and point AUTOCCL_LIB_DIR at "
            "the folder holding libautoccl-nccl.so",
        ), None
    try:
        lib = ctypes.CDLL(str(path))
    except OSError as e:
        return Check(
            "plugin",
            title,
            FAIL,
            f"{path} does not load: {e}",
            "rebuild it on this machine (its compiler, glibc and libstdc++), or point AUTOCCL_LIB_DIR at a "
            "working build",
            {"path": str(path)},
        ), None
    tuner = tuple(v for v, sym in sorted(TUNER_SYMBOLS.items()) if hasattr(lib, sym))
    profiler = tuple(v for v, sym in sorted(PROFILER_SYMBOLS.items()) if hasattr(lib, sym))
    exported = [TUNER_SYMBOLS[v] for v in tuner] + [PROFILER_SYMBOLS[v] for v in profiler]
    name = None
    if exported:  # every plugin struct starts with the plugin's name, which NCCL's log shows
        raw = ctypes.c_char_p.in_dll(lib, exported[0]).value
        name = raw.decode(errors="replace") if raw else None
    info = PluginInfo(str(path), name, tuner, profiler)
    data = {"path": str(path), "name": name, "tuner": list(tuner), "profiler": list(profiler)}
    listed = ", ".join(exported) or "none"
    if not tuner or not profiler:
        what = "tuner" if not tuner else "profiler"
        return Check(
            "plugin",
            title,
            FAIL,
            f"{path} loads but exports no {what} plugin (exports: {listed})",
            "it is not autoccl's plugin library, or a broken build: rebuild it",
            data,
        ), info
    missing = [s for s in [*TUNER_SYMBOLS.values(), *PROFILER_SYMBOLS.values()] if s not in exported]
    if missing:
        return Check(
            "plugin",
            title,
            WARN,
            f"{path} loads; exports {listed}, not {', '.join(missing)}",
            "an older build: rebuild it so that newer NCCL takes its newest interfaces",
            data,
        ), info
    return Check("plugin", title, OK, f"{path} loads; exports {listed}", None, data), info


# --------------------------------------------------------------------------------------------------- 2. NCCL


def _source_of(env: Mapping[str, str], library: str) -> str:
    """Where nccl_probe.find_nccl_library found `library`."""
    if env.get(nccl_probe.LIBRARY_VAR):
        return nccl_probe.LIBRARY_VAR
    if "/" in library:
        return "the nvidia-nccl wheel PyTorch loads"
    return "the system's, as the dynamic loader finds it"


def _loaded_from(library: str) -> str | None:
    """The file this process mapped for `library` (a path, or a name the dynamic loader searched for)."""
    if "/" in library:
        return str(Path(library).resolve())
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    stem = library.split(".so")[0]
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        if path.startswith("/") and Path(path).name.startswith(stem + ".so"):
            return path
    return None


def interfaces_text(tuner: int | None, profiler: int | None) -> str:
    t = f"tuner v{tuner}" if tuner else "no tuner"
    p = f"profiler v{profiler}" if profiler else "no profiler"
    return f"{t} and {p}"


def check_nccl(
    env: Mapping[str, str], plugin: PluginInfo | None, gpus: Gpus
) -> tuple[Check, NcclInfo | None]:
    """The NCCL the job loads (found as `--nccl-channels auto` finds it), its version, and which interfaces
    it takes from the plugin."""
    title = "NCCL library"
    where = f"set {nccl_probe.LIBRARY_VAR} to the libnccl.so.2 the job loads"
    try:
        library = nccl_probe.find_nccl_library(env)
    except nccl_probe.ProbeError as e:
        return Check("nccl", title, FAIL, str(e), where), None
    source = _source_of(env, library)
    try:
        version = nccl_probe.nccl_version_code(library)
    except nccl_probe.ProbeError as e:
        # no NCCL where no GPU is: the emulator and the demo still run here
        status = FAIL if gpus.count else WARN
        return Check(
            "nccl",
            title,
            status,
            f"no NCCL found ({source}): {e}",
            f"install NCCL (PyTorch's nvidia-nccl wheel, or the system's libnccl2), or {where}",
            {"library": library, "source": source},
        ), None
    path = _loaded_from(library)
    info = NcclInfo(library, path, version)
    text = nccl_probe.version_text(version)
    tuner_versions = plugin.tuner if plugin else tuple(TUNER_SYMBOLS)
    profiler_versions = plugin.profiler if plugin else tuple(PROFILER_SYMBOLS)
    tuner = taken_interface(version, TUNER_SINCE, tuner_versions)
    profiler = taken_interface(version, PROFILER_SINCE, profiler_versions)
    data = {
        "library": library,
        "path": path,
        "source": source,
        "version": text,
        "version_code": version,
        "tuner_interface": tuner,
        "profiler_interface": profiler,
    }
    detail = f"NCCL {text} ({path or library}; {source})"
    if version < MIN_NCCL:
        return Check(
            "nccl",
            title,
            FAIL,
            f"{detail}: older than 2.28.3, the oldest NCCL with the plugin interfaces autoccl implements "
            "(the library behaves as no tuner there)",
            "use NCCL 2.28.3 - 2.32.x (pip install -U nvidia-nccl-cu12, or a newer PyTorch)",
            data,
        ), info
    takes = f"it takes {interfaces_text(tuner, profiler)} from the plugin"
    if plugin is not None and (tuner is None or profiler is None):
        return Check(
            "nccl",
            title,
            FAIL if tuner is None else WARN,
            f"{detail}: {takes} (it exports tuner v{'/'.join(map(str, plugin.tuner)) or '-'}, profiler "
            f"v{'/'.join(map(str, plugin.profiler)) or '-'})",
            "rebuild the plugin from this checkout: it exports every interface NCCL 2.28.3 - 2.32.x takes",
            data,
        ), info
    if (version // 10000, version % 10000 // 100) > NEWEST_TESTED_MINOR:
        return Check(
            "nccl",
            title,
            WARN,
            f"{detail}: newer than the newest measured with autoccl (2.32.x); {takes} if it still knows them",
            "the communicator check below says what it took; report a version it refuses",
            data,
        ), info
    return Check("nccl", title, OK, f"{detail}: {takes}", None, data), info


# ------------------------------------------------------------------------------------------ 2b. CTA controls


@dataclass(frozen=True)
class TorchNcclConfig:
    """What the installed PyTorch offers to bound NCCL's CTAs: its ProcessGroupNCCL.Options().config."""

    version: str | None
    fields: tuple[str, ...] = ()  # the config's public attributes (none: see `why`)
    policies: dict[str, int] = field(default_factory=dict)  # ProcessGroupNCCL.NCCL_CTA_POLICY_*
    why: str | None = None  # why there is no config to read

    @property
    def cta_fields(self) -> tuple[str, ...]:
        return tuple(f for f in self.fields if re.search("cta|cga|channel", f, re.I))

    def as_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "fields": list(self.fields),
            "cta_fields": list(self.cta_fields),
            "policies": self.policies,
            "why": self.why,
        }


def torch_nccl_config() -> TorchNcclConfig:
    """ProcessGroupNCCL.Options().config of the installed torch (which PyTorch built against its NCCL's
    ncclConfig_t: PyTorch 2.11.0 has min_ctas, max_ctas, cga_cluster_size, cta_policy, nvls_ctas)."""
    if importlib.util.find_spec("torch") is None:
        return TorchNcclConfig(None, why="torch is not installed")
    try:
        import torch
        import torch.distributed as dist

        version = str(torch.__version__)
        pg = getattr(dist, "ProcessGroupNCCL", None)
        if pg is None:
            return TorchNcclConfig(version, why="this torch has no ProcessGroupNCCL (a build without NCCL)")
        options = pg.Options()
        if not hasattr(options, "config"):
            return TorchNcclConfig(
                version, why="its ProcessGroupNCCL.Options has no config (NCCL before 2.17)"
            )
        config = options.config
        fields = tuple(
            sorted(a for a in dir(config) if not a.startswith("_") and not callable(getattr(config, a, None)))
        )
        policies = {a: int(getattr(pg, a)) for a in dir(pg) if a.startswith("NCCL_CTA_POLICY_")}
        return TorchNcclConfig(version, fields, policies)
    except Exception as e:  # a broken install: say so, the rest of the report stands
        return TorchNcclConfig(None, why=f"torch failed: {type(e).__name__}: {e}")


def torch_text(config: TorchNcclConfig | None) -> str:
    if config is None:
        return "PyTorch not asked (no GPU here; importing it costs seconds)"
    if config.why:
        return f"PyTorch: {config.why}"
    if not config.cta_fields:
        return f"torch {config.version}: ProcessGroupNCCL.Options().config has no CTA attribute"
    text = f"torch {config.version}: ProcessGroupNCCL.Options().config.{{{', '.join(config.cta_fields)}}}"
    if config.policies:
        names = ", ".join(p.removeprefix("NCCL_CTA_POLICY_") for p in config.policies)
        text += f" and ProcessGroupNCCL.NCCL_CTA_POLICY_{{{names}}}"
    return text


def check_cta(nccl: NcclInfo | None, torch_config: TorchNcclConfig | None) -> Check:
    """Which CTA (channel) controls the job's NCCL offers the application, per communicator and per call (from
    cta_controls' table of NCCL's headers), and which of them the installed PyTorch exposes. autoccl uses none
    of them: it sets each call's channels through the tuner and raises communicators through NCCL_MIN_CTAS /
    NCCL_MAX_CTAS. Informational: ok, or warn where the table cannot say (a newer NCCL) or NCCL has none."""
    title = "CTA controls"
    if nccl is None:
        return _skipped("cta", title, "no NCCL to read the version of (the NCCL check says why)")
    c = cta_controls.controls_of(nccl.version)
    text = nccl_probe.version_text(nccl.version)
    data: dict[str, Any] = {
        "version": text,
        "comm_fields": list(c.comm_fields),
        "policies": list(c.policies),
        "comm_entry_points": list(c.comm_entry_points),
        "per_call_fields": list(c.per_call_fields),
        "per_call_entry_points": list(c.per_call_entry_points),
        "newer_than_table": c.newer_than_read,
        "table_newest": cta_controls.NEWEST_READ_TEXT,
        "autoccl_uses": {
            "per_call": "the tuner's channel count (getCollInfo nChannels)",
            "communicator": list(nccl_probe.CEILING_VARS),
            "application_config": False,
        },
        "torch": torch_config.as_json() if torch_config else None,
    }
    if nccl.version < MIN_NCCL:
        uses = "autoccl's tuner does not run on it (2.28.3 or newer)"
    else:
        uses = (
            "autoccl sets each call's channels through the tuner (getCollInfo) and raises communicators "
            f"through {'/'.join(nccl_probe.CEILING_VARS)}"
        ) + (", not through ncclCollConfig_t" if c.per_call else "")
    detail = (
        f"NCCL {text}: per communicator: {cta_controls.comm_text(c)}; "
        f"per call: {cta_controls.per_call_text(c)}; {uses}; {torch_text(torch_config)}"
    )
    if c.newer_than_read:
        return Check(
            "cta",
            title,
            WARN,
            f"NCCL {text} is newer than the table (headers read up to {cta_controls.NEWEST_READ_TEXT}): "
            f"at least {detail.removeprefix(f'NCCL {text}: ')}",
            "this NCCL's include/nccl.h says what it adds (docs/cta-controls.md: scripts/nccl_cta_table.py "
            "reads it from the wheel); autoccl's tuner still sets the channels of each call",
            data,
        )
    if not c.comm_fields:
        return Check(
            "cta",
            title,
            WARN,
            detail,
            "NCCL 2.17 or newer bounds a communicator's CTAs (ncclConfig_t minCTAs/maxCTAs); autoccl needs "
            "2.28.3 or newer",
            data,
        )
    return Check("cta", title, OK, detail, None, data)


# ----------------------------------------------------------------------------------------------- 3. settings


def check_settings(env: Mapping[str, str], mode: str | None) -> Check:
    """Every AUTOCCL_* variable valid (as the library and the CLI check them) and none unknown."""
    title = "AUTOCCL_* settings"
    job = dict(env)
    if mode:  # `autoccl run --mode MODE` sets AUTOCCL_MODE for the job
        job["AUTOCCL_MODE"] = mode
    bad = settings.problems(job)
    unknown = settings.unknown(env)
    names = sorted(k for k in env if k.startswith("AUTOCCL_"))
    data = {"set": names, "problems": bad, "unknown": unknown}
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        return Check(
            "settings",
            title,
            FAIL,
            bad[0] + more,
            "fix or unset it: the library refuses it (one WARN, then no tuner) and `autoccl run` will not "
            "start; docs/architecture.md lists every setting",
            data,
        )
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        return Check(
            "settings",
            title,
            WARN,
            unknown[0] + more,
            "the library ignores it: fix the name or unset it",
            data,
        )
    shown = ", ".join(names[:6]) + (" ..." if len(names) > 6 else "")
    detail = f"{len(names)} set, all valid: {shown}" if names else "none set (defaults)"
    return Check("settings", title, OK, detail, None, data)


# --------------------------------------------------------------------------------------------------- 4. GPUs


def driver_gpus(proc_dir: Path | None = None) -> list[str] | None:
    """The model of each GPU the NVIDIA driver lists (its `Model:` lines, as the library's fingerprint reads
    them); None without the driver."""
    where = PROC_GPUS if proc_dir is None else proc_dir
    if not where.is_dir():
        return None
    models: list[str] = []
    for gpu in sorted(where.iterdir()):
        try:
            lines = (gpu / "information").read_text(errors="replace").splitlines()
        except OSError:
            continue
        model = next((ln[len("Model:") :].strip() for ln in lines if ln.startswith("Model:")), "")
        if model:
            models.append(model)
    return models


def torch_gpus() -> tuple[str | None, int | None]:
    """(torch's version, the GPUs it sees), or (None, None) where torch is not installed or fails."""
    if importlib.util.find_spec("torch") is None:
        return None, None
    try:
        import torch

        return str(torch.__version__), int(torch.cuda.device_count())
    except Exception:  # a broken install says nothing useful here: the driver's count stands
        return None, None


def find_gpus() -> Gpus:
    models = driver_gpus()
    if not models:  # no driver, no GPU: torch sees none either, and importing it costs seconds
        return Gpus(models)
    version, count = torch_gpus()
    return Gpus(models, version, count)


def check_gpus(gpus: Gpus, env: Mapping[str, str]) -> Check:
    title = "GPUs"
    data: dict[str, Any] = {
        "driver": gpus.models is not None,
        "count": gpus.count,
        "models": gpus.models or [],
        "torch": gpus.torch,
        "torch_count": gpus.torch_count,
        "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
    }
    demo = "the emulator (`autoccl demo`) runs without one"
    if gpus.models is None:
        return Check(
            "gpus",
            title,
            WARN,
            f"no NVIDIA driver ({PROC_GPUS} is missing): no NCCL job runs here; {demo}",
            "run `autoccl doctor` on the machine the job runs on",
            data,
        )
    if not gpus.models:
        return Check(
            "gpus", title, WARN, f"the NVIDIA driver lists no GPU; {demo}", "check `nvidia-smi`", data
        )
    kinds = sorted(set(gpus.models))
    detail = f"{gpus.count} x {kinds[0]}" if len(kinds) == 1 else f"{gpus.count} GPUs ({', '.join(kinds)})"
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        detail += f"; CUDA_VISIBLE_DEVICES={visible}"
    if gpus.torch is not None:
        detail += f"; torch {gpus.torch} sees {gpus.torch_count}"
        if not gpus.torch_count:
            return Check(
                "gpus",
                title,
                WARN,
                detail,
                "torch sees no GPU: a CPU-only torch build, or CUDA_VISIBLE_DEVICES hides them",
                data,
            )
    return Check("gpus", title, OK, detail, None, data)


# --------------------------------------------------------------------------------------------------- 5. NVLS


def check_multicast(env: Mapping[str, str]) -> Check:
    """The NVLink multicast variables `autoccl run|env` give every job (tuner_env.SAFETY_ENV)."""
    title = "NVLink multicast off"
    job = ", ".join(f"{k}={v}" for k, v in SAFETY_ENV.items())
    here = {k: env.get(k) for k in SAFETY_ENV}
    data = {"job": dict(SAFETY_ENV), "environment": here}
    other = [f"{k}={v}" for k, v in here.items() if v is not None and v != SAFETY_ENV[k]]
    if other:
        return Check(
            "nvls",
            title,
            WARN,
            f"`autoccl run|env` give the job {job}; this environment has {', '.join(other)}, which a job "
            "started without them keeps",
            'start jobs with `autoccl run` (or after `eval "$(autoccl env)"`), or unset '
            + ", ".join(o.split("=", 1)[0] for o in other),
            data,
        )
    unset = [k for k, v in here.items() if v is None]
    detail = f"`autoccl run|env` give the job {job}"
    if unset:
        detail += " (not set in this environment: a job started without them has NCCL's default)"
    return Check("nvls", title, OK, detail, None, data)


# -------------------------------------------------------------------------------------------------- 6. cache


def machine_hardware(env: Mapping[str, str], gpus: Gpus) -> tuple[str, int]:
    """(GPU model, GPUs) of this machine's fingerprint, as the library detects them (engine/fingerprint.cc):
    AUTOCCL_HW ("<model>" or "<model>x<count>") where set, else the driver's models ("mixed" where they
    differ; "unknown", 0 without a GPU)."""
    override = settings.value_of("AUTOCCL_HW", env)
    if override:
        model, count = override, 1
        m = re.fullmatch(r"(.*)[xX]([0-9]{1,5})", override)
        if m and int(m.group(2)) > 0:
            model, count = m.group(1).strip(" \t\n\v\f\r"), int(m.group(2))
        return model or "unknown", count
    if not gpus.models:
        return "unknown", 0
    kinds = set(gpus.models)
    return (gpus.models[0] if len(kinds) == 1 else "mixed"), gpus.count


def check_cache(
    options: DoctorOptions, env: Mapping[str, str], mode: str, gpus: Gpus, nccl: NcclInfo | None
) -> Check:
    """The cache the library reads and writes: the folder, whether it can be written, its tables, and the
    tables of this machine (a fingerprint also holds the communicator's ranks and nodes, which only the job
    knows: a table of this machine's GPUs and NCCL is one the job may use)."""
    title = "table cache"
    override = options.cache_dir or None
    folder = tables.tables_dir(override)
    try:
        paths = tables.cached_tables(override)
    except tables.TableError as e:
        return Check(
            "cache",
            title,
            FAIL,
            f"{folder}: {e}",
            "give a folder (--cache-dir or AUTOCCL_CACHE_DIR), or move the file out of the way",
            {"dir": str(folder)},
        )
    unwritable = unwritable_folder(folder)
    if override:  # `autoccl run --cache-dir` gives the job this folder as AUTOCCL_CACHE_DIR, checked alike
        given = str(Path(override).expanduser().resolve())
        refused = settings.problems({"AUTOCCL_CACHE_DIR": given}, readers=("library",))
        if refused:
            return Check(
                "cache",
                title,
                FAIL,
                f"--cache-dir {override}: {refused[0]}",
                "give an existing folder or a new one in an existing folder: `autoccl run` refuses this "
                "one, and the library loads no tuner under it",
                {"dir": str(folder), "writable": unwritable is None},
            )
    model, count = machine_hardware(env, gpus)
    read: list[tables.Table] = []
    unreadable: list[str] = []
    for path in paths:
        try:
            read.append(tables.load_table(path, path.name.removesuffix(tables.TABLE_SUFFIX)))
        except tables.TableError as e:
            unreadable.append(f"{path.name}: {e}")
    mine = [
        t
        for t in read
        if t.meta.get("gpu") == model
        and t.meta.get("gpus") == str(count)
        and (nccl is None or t.meta.get("nccl") == str(nccl.version))
    ]
    machine = (f"{model} x {count}" if count else "no GPU") + (
        f", NCCL {nccl_probe.version_text(nccl.version)}" if nccl else ""
    )
    data = {
        "dir": str(folder),
        "writable": unwritable is None,
        "tables": len(paths),
        "unreadable": unreadable,
        "machine": {"gpu": model, "gpus": count, "nccl": nccl.version if nccl else None},
        "machine_tables": [
            {"fingerprint": t.fingerprint, **{k: t.meta.get(k) for k in ("ranks", "nodes", "nvl_domains")}}
            for t in mine
        ],
    }
    shapes = ", ".join(
        f"{t.fingerprint[:8]} ({t.meta.get('ranks', '?')} ranks, {t.meta.get('nodes', '?')} nodes)"
        for t in mine[:3]
    ) + (" ..." if len(mine) > 3 else "")
    detail = f"{folder}: {len(paths)} table(s); for this machine ({machine}): " + (
        f"{len(mine)}: {shapes}" if mine else "none"
    )
    if unwritable:
        return Check(
            "cache",
            title,
            WARN,
            f"{detail}; {unwritable}: the library cannot save what online and observe mode learn",
            "give a writable folder: --cache-dir DIR (autoccl run) or AUTOCCL_CACHE_DIR",
            data,
        )
    if unreadable:
        return Check(
            "cache",
            title,
            WARN,
            f"{detail}; {len(unreadable)} unreadable ({unreadable[0]})",
            "the plugin moves an unreadable table aside at its next write; `autoccl cache clear` removes it",
            data,
        )
    if mode == "table" and not mine:
        return Check(
            "cache",
            title,
            WARN,
            f"{detail}; table mode applies nothing until one exists",
            "run the job once with --mode online (it writes one), or `autoccl cache import FILE`",
            data,
        )
    return Check("cache", title, OK, detail, None, data)


# ------------------------------------------------------------------------------------------- 7. communicator

# NCCL's INFO lines about its tuner and profiler plugins, as NCCL 2.28.3 - 2.30.7 print them (the same in
# each; NCCL starts every line with "<host>:<pid>:<tid> [<rank>] NCCL INFO "). From NCCL's source:
#   src/plugin/tuner/tuner_v5.cc, tuner_v6.cc  "TUNER/Plugin: Using %s (v5)"           (INIT|TUNING)
#   src/plugin/profiler/profiler_v5.cc, _v6.cc "PROFILER/Plugin: Loaded %s (v5)"       (INIT)
#   src/plugin/tuner.cc     "NCCL_TUNER_PLUGIN set by environment to %s"               (ENV|TUNING)
#                           "Successfully loaded external tuner plugin %s"             (INIT|TUNING)
#                           "External tuner plugin %s is unsupported"                  (INIT|TUNING)
#   src/plugin/profiler.cc  "NCCL_PROFILER_PLUGIN set by environment to %s"            (ENV)
#                           "Successfully loaded external profiler plugin %s"          (INIT)
#                           "External profiler plugin %s is unsupported"               (INIT)
#                           "Profiler init failed with error '%d': %s. Continue without profiler."
#   src/plugin/plugin_open.cc "%s/Plugin: Could not find:%s%s%s" (no such file), "%s/Plugin: %s: %s" (dlopen's
#                           error), with TUNER or PROFILER for %s
# NCCL 2.32.3 prints the same (benchmarks/results/h200x1/nccl-2.32/plugin-job.txt).
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,TUNING,ENV"}
_INFO = r"NCCL INFO "
_TUNER_USING = re.compile(_INFO + r"TUNER/Plugin: Using (.+?) \(v(\d+)\)[ \t]*$", re.M)
_PROFILER_LOADED = re.compile(_INFO + r"PROFILER/Plugin: Loaded (.+?) \(v(\d+)\)[ \t]*$", re.M)
_LOADED_FROM = re.compile(_INFO + r"Successfully loaded external (tuner|profiler) plugin (.+?)[ \t]*$", re.M)
_ENV_SET = re.compile(_INFO + r"NCCL_(TUNER|PROFILER)_PLUGIN set by environment to (.+?)[ \t]*$", re.M)
_REFUSED = re.compile(
    _INFO
    + r"((?:External (?:tuner|profiler) plugin .+ is unsupported)"
    + r"|(?:(?:TUNER|PROFILER)/Plugin: (?!Using |Loaded |Closing ).+)"
    + r"|(?:Profiler init failed with error .+))[ \t]*$",
    re.M,
)
_WARN = re.compile(r"NCCL WARN (.+?)[ \t]*$", re.M)


@dataclass
class PluginLoad:
    """What NCCL's log says it did with the plugin libraries it was given."""

    tuners: list[tuple[str, int]] = field(default_factory=list)  # (name, interface version), one per process
    profilers: list[tuple[str, int]] = field(default_factory=list)
    loaded_from: dict[str, str] = field(default_factory=dict)  # tuner|profiler -> the library's path
    given: dict[str, str] = field(default_factory=dict)  # tuner|profiler -> NCCL_*_PLUGIN as NCCL read it
    refused: list[str] = field(default_factory=list)  # NCCL's lines saying a plugin was not taken
    warnings: list[str] = field(default_factory=list)  # NCCL WARN lines (the library's own among them)

    def as_json(self) -> dict[str, Any]:
        return {
            "tuner": [{"name": n, "version": v} for n, v in self.tuners],
            "profiler": [{"name": n, "version": v} for n, v in self.profilers],
            "loaded_from": self.loaded_from,
            "given": self.given,
            "refused": self.refused,
            "warnings": self.warnings,
        }


def parse_plugin_log(log: str) -> PluginLoad:
    """NCCL's INFO log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,TUNING,ENV) of one process: the tuner and
    profiler plugins it took, by name and interface version, and the lines saying why it took none."""
    out = PluginLoad()
    out.tuners = [(m.group(1), int(m.group(2))) for m in _TUNER_USING.finditer(log)]
    out.profilers = [(m.group(1), int(m.group(2))) for m in _PROFILER_LOADED.finditer(log)]
    out.loaded_from = {m.group(1): m.group(2) for m in _LOADED_FROM.finditer(log)}
    out.given = {m.group(1).lower(): m.group(2) for m in _ENV_SET.finditer(log)}
    out.refused = list(dict.fromkeys(m.group(1) for m in _REFUSED.finditer(log)))
    out.warnings = list(dict.fromkeys(m.group(1) for m in _WARN.finditer(log)))[:10]
    return out


def judge_plugin_load(
    load: PluginLoad,
    plugin_name: str | None = "autoccl",
    expected: tuple[int | None, int | None] = (None, None),
    ranks: int | None = None,
) -> Check:
    """The verdict on one communicator's log: fail where NCCL took no tuner from the plugin (its internal
    tuner decides everything) or another library's; warn where it took no profiler from it (online mode
    cannot time calls) or other interface versions than `expected` (tuner, profiler) says."""
    title = "NCCL took the plugin"
    data: dict[str, Any] = {"ranks": ranks, "expected": list(expected), **load.as_json()}
    why = f" ({'; '.join(load.refused[:2])})" if load.refused else ""
    ours = plugin_name or "autoccl"
    tuner_versions = sorted({v for n, v in load.tuners if n == ours})
    profiler_versions = sorted({v for n, v in load.profilers if n == ours})
    others = sorted({n for n, _ in load.tuners + load.profilers if n != ours})
    given = load.given.get("tuner")
    if not load.tuners:
        if given is None:
            hint = "NCCL did not see NCCL_TUNER_PLUGIN (the child's environment lost it?)"
        else:
            hint = "check that the library loads on this machine and exports ncclTunerPlugin_v5"
        return Check(
            "communicator",
            title,
            FAIL,
            f"NCCL loaded no tuner plugin and uses its internal tuner{why}",
            hint,
            data,
        )
    if not tuner_versions:
        return Check(
            "communicator",
            title,
            FAIL,
            f"NCCL took the tuner of {', '.join(others)}, not {ours}{why}",
            "another library answered for the tuner (a network plugin's?): check NCCL_TUNER_PLUGIN",
            data,
        )
    took = f"tuner v{'/'.join(map(str, tuner_versions))}"
    over = f" over {ranks} GPU{'s' if ranks != 1 else ''}" if ranks else ""
    if not profiler_versions:
        return Check(
            "communicator",
            title,
            WARN,
            f"NCCL took {took} but no profiler from {ours}{why}{over}: fixed and table decisions apply, "
            "online mode cannot time calls",
            "check NCCL_PROFILER_PLUGIN: autoccl run|env set it to the same library",
            data,
        )
    took += f" and profiler v{'/'.join(map(str, profiler_versions))}"
    expected_tuner, expected_profiler = expected
    unexpected = [
        f"{what} v{want}"
        for what, want, got in (
            ("tuner", expected_tuner, tuner_versions),
            ("profiler", expected_profiler, profiler_versions),
        )
        if want is not None and got != [want]
    ]
    if unexpected:
        return Check(
            "communicator",
            title,
            WARN,
            f"NCCL took {took} from {ours}{over}; its version says {' and '.join(unexpected)}",
            "the version table in autoccl/doctor.py may be out of date for this NCCL: please report it",
            data,
        )
    return Check("communicator", title, OK, f"NCCL took {took} from {ours}{over}", None, data)


def communicator_env(env: Mapping[str, str]) -> dict[str, str]:
    """The check communicator's environment: the job's, its AUTOCCL_* settings replaced by the plugin's
    variables in mode off (the library loaded, nothing applied), NCCL's INFO log of its plugin loading."""
    child = plain_nccl_env(env)
    child.update(plugin_env("off", run_host=None))
    child.update(DEBUG_ENV)
    child.pop("NCCL_DEBUG_FILE", None)  # the log must reach the child's stdout
    return child


def check_communicator(
    plugin: PluginInfo,
    nccl: NcclInfo,
    env: Mapping[str, str],
    gpus: int | None = None,
    timeout_s: float = 120.0,
) -> Check:
    """One communicator over `gpus` local GPUs (default: every visible one) created in a child process with
    the plugin loaded in mode off; the verdict of NCCL's log on it."""
    try:
        done = nccl_probe.create_communicator(
            nccl.library, communicator_env(env), gpus, min_ranks=1, timeout_s=timeout_s
        )
    except (nccl_probe.ProbeError, ArtefactNotFound) as e:
        return Check(
            "communicator",
            "NCCL took the plugin",
            FAIL,
            f"NCCL could not create a communicator with the plugin loaded: {e}",
            "run the same with NCCL_DEBUG=INFO (autoccl run --mode off -- YOUR_JOB) and read NCCL's WARN "
            "lines; --no-gpu-check skips this check",
        )
    expected = (
        taken_interface(nccl.version, TUNER_SINCE, plugin.tuner),
        taken_interface(nccl.version, PROFILER_SINCE, plugin.profiler),
    )
    return judge_plugin_load(parse_plugin_log(done.log), plugin.name, expected, done.ranks)


# ------------------------------------------------------------------------------------------------------- all


def _skipped(name: str, title: str, why: str) -> Check:
    return Check(name, title, SKIPPED, why)


def run_checks(options: DoctorOptions, env: Mapping[str, str] | None = None) -> list[Check]:
    """Every check, in the report's order."""
    e = os.environ if env is None else env
    mode = job_mode(options, e)
    gpus = find_gpus()
    plugin_check, plugin = check_plugin()
    nccl_check, nccl = check_nccl(e, plugin, gpus)
    torch_config = torch_nccl_config() if gpus.count else None  # its import costs seconds: job machines only
    checks = [
        plugin_check,
        nccl_check,
        check_cta(nccl, torch_config),
        check_settings(e, options.mode),
        check_gpus(gpus, e),
        check_multicast(e),
        check_cache(options, e, mode, gpus, nccl),
    ]
    title = "NCCL took the plugin"
    if not options.gpu_check:
        checks.append(_skipped("communicator", title, "--no-gpu-check"))
    elif not gpus.count:
        checks.append(_skipped("communicator", title, "no GPU here"))
    elif plugin is None or nccl is None:
        checks.append(_skipped("communicator", title, f"no {'plugin' if plugin is None else 'NCCL'} to load"))
    else:
        checks.append(check_communicator(plugin, nccl, e, options.gpus, options.timeout_s))
    return checks


def report(checks: list[Check], mode: str) -> dict[str, Any]:
    """The --json document."""
    counts = {s: sum(c.status == s for c in checks) for s in STATUSES}
    return {
        "schema": SCHEMA_VERSION,
        "autoccl": __version__,
        "mode": mode,
        "ok": counts[FAIL] == 0,
        "counts": counts,
        "checks": [c.as_json() for c in checks],
    }
