"""`autoccl doctor`: each check against a real plugin build (AUTOCCL_LIB_DIR), a missing and a broken library,
bad and unknown settings, the cache, NCCL's plugin-loading log (canned lines in NCCL's formats, and a stand-in
NCCL that loads the plugin as NCCL does), the --json report and the exit codes. No GPU and no NCCL needed."""

from __future__ import annotations

import dataclasses
import importlib.machinery
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoccl import doctor as D
from autoccl import tables
from autoccl._paths import ArtefactNotFound, plugin_path
from autoccl.cli import main

# A stand-in for libnccl.so.2 that loads NCCL_TUNER_PLUGIN and NCCL_PROFILER_PLUGIN as NCCL does (dlopen, then
# the plugin structs newest interface first, the newest it knows by its version) and logs it in NCCL's words
# (the formats of src/plugin/tuner.cc, profiler.cc, tuner/tuner_v5.cc, profiler/profiler_v5.cc).
FAKE_NCCL = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static int version(void) { const char* v = getenv("FAKE_NCCL_VERSION"); return v ? atoi(v) : 22809; }
int ncclGetVersion(int* v) { *v = version(); return 0; }
const char* ncclGetErrorString(int r) { (void)r; return "internal error (fake)"; }
static int info(void) { const char* d = getenv("NCCL_DEBUG"); return d && !strcmp(d, "INFO"); }
#define INFO(...) do { if (info()) { printf("box:1:1 [0] NCCL INFO " __VA_ARGS__); printf("\n"); } } while (0)
struct Iface { const char* sym; int since; int v; };
static void load(const char* kind, const char* var, const char* upper, const char* verb,
                 const struct Iface* f) {
  const char* path = getenv(var);
  if (!path) return;
  INFO("%s set by environment to %s", var, path);
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!lib) { INFO("%s/Plugin: %s: %s", upper, path, dlerror()); return; }
  for (; f->sym; ++f) {
    if (version() < f->since) continue;
    const char** s = (const char**)dlsym(lib, f->sym);
    if (!s) continue;
    INFO("%s/Plugin: %s %s (v%d)", upper, verb, *s, f->v);
    INFO("Successfully loaded external %s plugin %s", kind, path);
    return;
  }
  INFO("External %s plugin %s is unsupported", kind, path);
}
int ncclCommInitAll(void** comms, int ndev, const int* devlist) {
  (void)devlist;
  if (getenv("FAKE_NCCL_FAIL")) return 3;
  static const struct Iface profilers[] = {{"ncclProfiler_v7", 23100, 7}, {"ncclProfiler_v6", 22900, 6},
                                           {"ncclProfiler_v5", 0, 5}, {0, 0, 0}};
  static const struct Iface tuners[] = {{"ncclTunerPlugin_v6", 23003, 6}, {"ncclTunerPlugin_v5", 0, 5},
                                        {0, 0, 0}};
  load("profiler", "NCCL_PROFILER_PLUGIN", "PROFILER", "Loaded", profilers);
  load("tuner", "NCCL_TUNER_PLUGIN", "TUNER", "Using", tuners);
  for (int r = 0; r < ndev; ++r) comms[r] = (void*)(long)(r + 1);
  fflush(stdout);
  return 0;
}
int ncclCommDestroy(void* comm) { (void)comm; return 0; }
"""

# The CUDA driver calls the probe child makes to count GPUs (nccl_probe._visible_gpus).
FAKE_CUDA = r"""
#include <stdlib.h>
int cuInit(unsigned flags) { (void)flags; return 0; }
int cuDeviceGetCount(int* n) { *n = getenv("FAKE_CUDA_GPUS") ? atoi(getenv("FAKE_CUDA_GPUS")) : 2; return 0; }
"""

# NCCL 2.28.9's lines of one process that took the plugin (benchmarks/results/h200x1/inspector-chain-versions
# and h200x2/nccl-2.30-chunk-size: the formats of NCCL's src/plugin/tuner.cc, profiler.cc, tuner/tuner_v5.cc
# and profiler/profiler_v5.cc).
LIB = "/tmp/acbuild/lib/libautoccl-nccl.so"
TOOK_2_28 = f"""\
vm:4443:4443 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
vm:4443:4443 [0] NCCL INFO NCCL_PROFILER_PLUGIN set by environment to {LIB}
vm:4443:4443 [0] NCCL INFO PROFILER/Plugin: Loaded autoccl (v5)
vm:4443:4443 [0] NCCL INFO Successfully loaded external profiler plugin {LIB}
vm:4443:4443 [0] NCCL INFO NCCL_TUNER_PLUGIN set by environment to {LIB}
vm:4443:4443 [0] NCCL INFO TUNER/Plugin: Using autoccl (v5)
vm:4443:4443 [0] NCCL INFO Successfully loaded external tuner plugin {LIB}
vm:4443:4443 [0] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels
vm:4443:4443 [0] NCCL INFO TUNER/Plugin: Closing tuner: 'autoccl'
vm:4443:4443 [0] NCCL INFO PROFILER/Plugin: Closing profiler plugin autoccl
"""
# NCCL given a path that does not exist (src/plugin/plugin_open.cc: "%s/Plugin: Could not find:%s%s%s", the
# names tried each after a blank): no plugin loaded, NCCL's internal tuner decides.
NONE_LOADED = """\
vm:9:9 [0] NCCL INFO NCCL_PROFILER_PLUGIN set by environment to /gone/libautoccl-nccl.so
vm:9:9 [0] NCCL INFO PROFILER/Plugin: Could not find: /gone/libautoccl-nccl.so
vm:9:9 [0] NCCL INFO NCCL_TUNER_PLUGIN set by environment to /gone/libautoccl-nccl.so
vm:9:9 [0] NCCL INFO TUNER/Plugin: Could not find: /gone/libautoccl-nccl.so
vm:9:9 [0] NCCL INFO 24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels
"""
# A library NCCL opens but finds no interface it knows in (src/plugin/tuner.cc, profiler.cc).
UNSUPPORTED = """\
vm:9:9 [0] NCCL INFO NCCL_TUNER_PLUGIN set by environment to /x/libold.so
vm:9:9 [0] NCCL INFO External profiler plugin /x/libold.so is unsupported
vm:9:9 [0] NCCL INFO External tuner plugin /x/libold.so is unsupported
"""


def _build(source: str, out: Path, *libs: str) -> Path:
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        pytest.skip("no C compiler to build a stand-in library")
    src = out.with_suffix(".c")
    src.write_text(source)
    subprocess.run([compiler, "-shared", "-fPIC", "-o", str(out), str(src), *libs], check=True)
    return out


@pytest.fixture(scope="module")
def fake_nccl(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(FAKE_NCCL, tmp_path_factory.mktemp("nccl") / "libnccl.so.2", "-ldl")


@pytest.fixture(scope="module")
def fake_cuda_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(FAKE_CUDA, tmp_path_factory.mktemp("cuda") / "libcuda.so.1").parent


@pytest.fixture(scope="module")
def built_plugin() -> Path:
    """The real plugin (AUTOCCL_LIB_DIR, or the installed package's)."""
    try:
        return plugin_path()
    except ArtefactNotFound as e:
        pytest.skip(f"libautoccl-nccl.so not built: {e}")


@pytest.fixture(autouse=True)
def quiet_machine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test on the same machine whatever runs it: no AUTOCCL_* setting but AUTOCCL_LIB_DIR, no NVIDIA
    driver, no torch asked, a scratch cache, no NCCL (a file that is none) unless a test gives one."""
    for key in list(os.environ):
        if key.startswith("AUTOCCL_") and key != "AUTOCCL_LIB_DIR":
            monkeypatch.delenv(key)
    for key in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", __file__)  # a file, but no library: "no NCCL"
    monkeypatch.setattr(D, "PROC_GPUS", tmp_path / "no-driver")
    monkeypatch.setattr(D, "torch_gpus", lambda: (None, None))
    monkeypatch.setattr(D, "torch_nccl_config", lambda: D.TorchNcclConfig(None, why="torch is not installed"))


def _gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, model: str = "NVIDIA H200", n: int = 2) -> None:
    """The NVIDIA driver's /proc listing of `n` GPUs of `model` (as the library reads it)."""
    root = tmp_path / "proc-gpus"
    for i in range(n):
        (root / f"0000:{i:02x}:00.0").mkdir(parents=True)
        (root / f"0000:{i:02x}:00.0" / "information").write_text(f"Model: \t\t {model}\nIRQ:   42\n")
    monkeypatch.setattr(D, "PROC_GPUS", root)


def _doctor(*args: str) -> tuple[int, dict[str, D.Check], str]:
    r = CliRunner().invoke(main, ["doctor", "--json", *args])
    assert "Traceback" not in r.output, r.output
    doc = json.loads(r.stdout)
    return r.exit_code, {c["name"]: D.Check(**c) for c in doc["checks"]}, r.stdout


def by_name(checks: list[D.Check]) -> dict[str, D.Check]:
    return {c.name: c for c in checks}


# ------------------------------------------------------------------------------------------------- 1. plugin


def test_plugin_check_on_a_real_build(built_plugin: Path) -> None:
    check, info = D.check_plugin()
    assert check.status == D.OK, check
    assert info is not None and info.name == "autoccl"
    assert info.tuner == (5, 6) and info.profiler == (5, 6, 7)
    assert check.data["path"] == str(built_plugin)
    for sym in (
        "ncclTunerPlugin_v5",
        "ncclTunerPlugin_v6",
        "ncclProfiler_v5",
        "ncclProfiler_v6",
        "ncclProfiler_v7",
    ):
        assert sym in check.detail


def test_missing_plugin_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-lib"
    empty.mkdir()
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(empty))
    code, checks, _ = _doctor()
    assert code == 1
    assert checks["plugin"].status == D.FAIL and "not found in AUTOCCL_LIB_DIR" in checks["plugin"].detail
    assert checks["plugin"].fix
    assert checks["communicator"].status == D.SKIPPED


def test_broken_plugin_fails(fake_plugin: Path) -> None:
    """fake_plugin is an empty file where the library should be: found, but it does not load."""
    code, checks, _ = _doctor()
    assert code == 1
    assert checks["plugin"].status == D.FAIL and "does not load" in checks["plugin"].detail


def test_library_without_plugin_structs_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    lib = tmp_path / "lib"
    lib.mkdir()
    _build("int not_a_plugin(void) { return 0; }\n", lib / "libautoccl-nccl.so")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(lib))
    check, info = D.check_plugin()
    assert check.status == D.FAIL and "exports no tuner plugin" in check.detail
    assert info is not None and info.tuner == () and info.profiler == ()


# --------------------------------------------------------------------------------------------------- 2. NCCL

_ALL = D.PluginInfo("lib.so", "autoccl", (5, 6), (5, 6, 7))


@pytest.mark.parametrize(
    ("version", "status", "tuner", "profiler"),
    [
        ("22803", D.OK, 5, 5),
        ("22809", D.OK, 5, 5),
        ("22907", D.OK, 5, 6),
        ("23007", D.OK, 6, 6),
        ("23203", D.OK, 6, 7),
        ("23301", D.WARN, 6, 7),  # newer than measured: what it would take if it still knows them
        ("22703", D.FAIL, None, None),  # older than the interfaces: the library turns itself off
    ],
)
def test_nccl_version_and_interfaces(
    fake_nccl: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    status: str,
    tuner: int | None,
    profiler: int | None,
) -> None:
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setenv("FAKE_NCCL_VERSION", version)
    code = int(version)
    check, info = D.check_nccl(os.environ, _ALL, D.Gpus(None))
    assert check.status == status, check
    assert info is not None and info.version == code
    text = f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    assert check.data["version"] == text and f"NCCL {text}" in check.detail
    assert check.data["source"] == "AUTOCCL_NCCL_LIBRARY"
    if status != D.FAIL:
        assert (check.data["tuner_interface"], check.data["profiler_interface"]) == (tuner, profiler)
        assert D.interfaces_text(tuner, profiler) in check.detail
    else:
        assert check.fix and "2.28.3" in check.detail


def test_an_older_build_gives_newer_nccl_its_older_interfaces() -> None:
    assert D.taken_interface(23007, D.TUNER_SINCE, (5,)) == 5
    assert D.taken_interface(23203, D.PROFILER_SINCE, (5, 6)) == 6
    assert D.taken_interface(22809, D.TUNER_SINCE, (6,)) is None  # 2.28 knows no v6


def test_a_plugin_this_nccl_takes_no_tuner_from_fails(
    fake_nccl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    only_v6 = D.PluginInfo("lib.so", "autoccl", (6,), (5,))
    check, _ = D.check_nccl(os.environ, only_v6, D.Gpus(None))  # 2.28.9 knows tuner v5 alone
    assert check.status == D.FAIL and "takes no tuner and profiler v5" in check.detail and check.fix


def test_no_nccl_is_a_warning_without_gpus_and_a_failure_with_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check, info = D.check_nccl(os.environ, _ALL, D.Gpus(None))
    assert info is None and check.status == D.WARN and "cannot load NCCL" in check.detail
    check, _ = D.check_nccl(os.environ, _ALL, D.Gpus(["NVIDIA H200"]))
    assert check.status == D.FAIL and check.fix
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(tmp_path / "nowhere.so"))
    check, _ = D.check_nccl(os.environ, _ALL, D.Gpus(None))
    assert check.status == D.FAIL and "is not a file" in check.detail


# ------------------------------------------------------------------------------------------ 2b. CTA controls

REAL_TORCH_NCCL_CONFIG = D.torch_nccl_config  # quiet_machine puts a stand-in in its place

# PyTorch 2.11.0+cu130's ProcessGroupNCCL (the GPU image's; the wheel imported on a CPU machine): the public
# attributes of Options().config and the policy constants on ProcessGroupNCCL.
TORCH_2_11 = D.TorchNcclConfig(
    "2.11.0+cu130",
    (
        "blocking",
        "cga_cluster_size",
        "collnet_enable",
        "cta_policy",
        "max_ctas",
        "min_ctas",
        "net_name",
        "nvls_ctas",
        "split_share",
        "traffic_class",
    ),
    {"NCCL_CTA_POLICY_DEFAULT": 0, "NCCL_CTA_POLICY_EFFICIENCY": 1, "NCCL_CTA_POLICY_ZERO": 2},
)


def _cta(
    fake_nccl: Path, monkeypatch: pytest.MonkeyPatch, version: str, torch: D.TorchNcclConfig | None
) -> D.Check:
    """The CTA check for the NCCL the NCCL check found (the stand-in, reporting `version`)."""
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setenv("FAKE_NCCL_VERSION", version)
    _, info = D.check_nccl(os.environ, _ALL, D.Gpus(None))
    assert info is not None and info.version == int(version)
    return D.check_cta(info, torch)


def test_cta_controls_of_nccl_2_28_9_and_pytorch_2_11(
    fake_nccl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The GPU image's NCCL: every communicator CTA field and policy, no per-call config; the tuner's channel
    choice is what autoccl uses."""
    check = _cta(fake_nccl, monkeypatch, "22809", TORCH_2_11)
    assert check.status == D.OK and check.fix is None, check
    assert check.detail.startswith(
        "NCCL 2.28.9: per communicator: ncclConfig_t cgaClusterSize, minCTAs, maxCTAs, "
    )
    assert "CTAPolicy (DEFAULT, EFFICIENCY, ZERO), nvlsCTAs, nChannelsPerNetPeer" in check.detail
    assert "per call: none (ncclCollConfig_t came in 2.31)" in check.detail
    assert "through the tuner (getCollInfo)" in check.detail and "NCCL_MIN_CTAS/NCCL_MAX_CTAS" in check.detail
    assert (
        "torch 2.11.0+cu130: ProcessGroupNCCL.Options().config.{cga_cluster_size, cta_policy, max_ctas, "
        "min_ctas, nvls_ctas} and ProcessGroupNCCL.NCCL_CTA_POLICY_{DEFAULT, EFFICIENCY, ZERO}"
        in check.detail
    )
    data = check.data
    assert data["comm_fields"] == [
        "cgaClusterSize",
        "minCTAs",
        "maxCTAs",
        "CTAPolicy",
        "nvlsCTAs",
        "nChannelsPerNetPeer",
    ]
    assert data["policies"] == [
        "NCCL_CTA_POLICY_DEFAULT",
        "NCCL_CTA_POLICY_EFFICIENCY",
        "NCCL_CTA_POLICY_ZERO",
    ]
    assert "ncclCommSplit" in data["comm_entry_points"] and "ncclCommGrow" not in data["comm_entry_points"]
    assert data["per_call_fields"] == [] and data["per_call_entry_points"] == []
    assert data["newer_than_table"] is False and data["autoccl_uses"]["application_config"] is False
    assert data["torch"]["cta_fields"] == [
        "cga_cluster_size",
        "cta_policy",
        "max_ctas",
        "min_ctas",
        "nvls_ctas",
    ]


def test_cta_controls_of_nccl_2_31_name_the_per_call_config(
    fake_nccl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = _cta(fake_nccl, monkeypatch, "23102", None)
    assert check.status == D.OK, check
    assert (
        "per call: ncclCollConfig_t minCTAs, maxCTAs, nvlsCTAs, cgaClusterSize, CTAPolicy (through the "
        "nccl*Config collectives: AllReduce, Broadcast, Reduce, AllGather, ReduceScatter, AlltoAll, Gather, "
        "Scatter; no send/recv)" in check.detail
    )
    assert "not through ncclCollConfig_t" in check.detail  # not used by autoccl
    assert "ncclCommGrow" in check.detail
    assert "PyTorch not asked (no GPU here" in check.detail and check.data["torch"] is None
    assert check.data["per_call_entry_points"][0] == "ncclAllReduceConfig"


def test_cta_controls_of_a_newer_nccl_than_the_table_warn(
    fake_nccl: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    check = _cta(fake_nccl, monkeypatch, "23301", None)
    assert check.status == D.WARN and check.fix and "nccl.h" in check.fix, check
    assert check.detail.startswith(
        "NCCL 2.33.1 is newer than the table (headers read up to 2.32.3): at least per communicator: "
    )
    assert "per call: ncclCollConfig_t" in check.detail and check.data["newer_than_table"] is True


@pytest.mark.parametrize(
    ("version", "status", "said"),
    [
        ("21605", D.WARN, "ncclConfig_t has no CTA field (minCTAs, maxCTAs and cgaClusterSize came in 2.17)"),
        (
            "22105",
            D.OK,
            "ncclConfig_t cgaClusterSize, minCTAs, maxCTAs (at ncclCommInitRankConfig, ncclCommSplit)",
        ),
        ("22707", D.OK, "CTAPolicy (DEFAULT, EFFICIENCY), nvlsCTAs (at "),
    ],
)
def test_cta_controls_of_older_nccl(
    fake_nccl: Path, monkeypatch: pytest.MonkeyPatch, version: str, status: str, said: str
) -> None:
    check = _cta(fake_nccl, monkeypatch, version, None)
    assert check.status == status and said in check.detail, check
    assert "autoccl's tuner does not run on it (2.28.3 or newer)" in check.detail
    assert "per call: none" in check.detail and (check.fix is not None) == (status == D.WARN)


def test_cta_check_without_nccl_is_skipped_and_torch_says_why() -> None:
    check = D.check_cta(None, None)
    assert check.status == D.SKIPPED and check.name == "cta"
    assert D.torch_text(D.TorchNcclConfig("2.13.0+cpu", why="this torch has no ProcessGroupNCCL (x)")) == (
        "PyTorch: this torch has no ProcessGroupNCCL (x)"
    )
    bare = D.TorchNcclConfig("2.0.0", ("blocking", "net_name"))
    assert D.torch_text(bare) == "torch 2.0.0: ProcessGroupNCCL.Options().config has no CTA attribute"


def _fake_torch(monkeypatch: pytest.MonkeyPatch, nccl: bool) -> None:
    """A torch whose ProcessGroupNCCL.Options().config binds PyTorch 2.11's CTA attributes (or that has no
    ProcessGroupNCCL)."""

    class NCCLConfig:
        blocking = cga_cluster_size = min_ctas = max_ctas = cta_policy = nvls_ctas = -2147483648
        net_name = None

        def unsafe_get_ptr(self) -> int:  # a method: not a field
            return 0

    class ProcessGroupNCCL:
        NCCL_CTA_POLICY_DEFAULT, NCCL_CTA_POLICY_EFFICIENCY, NCCL_CTA_POLICY_ZERO = 0, 1, 2

        class Options:
            def __init__(self) -> None:
                self.config = NCCLConfig()

    torch = types.ModuleType("torch")
    torch.__spec__ = importlib.machinery.ModuleSpec("torch", None)
    torch.__version__ = "2.11.0+fake"  # type: ignore[attr-defined]
    dist = types.ModuleType("torch.distributed")
    if nccl:
        dist.ProcessGroupNCCL = ProcessGroupNCCL  # type: ignore[attr-defined]
    torch.distributed = dist  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setitem(sys.modules, "torch.distributed", dist)


def test_torch_nccl_config_reads_the_options_config(monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_torch(monkeypatch, nccl=True)
    got = REAL_TORCH_NCCL_CONFIG()  # not the fixture's stand-in
    assert got.version == "2.11.0+fake" and got.why is None
    assert got.fields == (
        "blocking",
        "cga_cluster_size",
        "cta_policy",
        "max_ctas",
        "min_ctas",
        "net_name",
        "nvls_ctas",
    )
    assert got.cta_fields == ("cga_cluster_size", "cta_policy", "max_ctas", "min_ctas", "nvls_ctas")
    assert got.policies == {
        "NCCL_CTA_POLICY_DEFAULT": 0,
        "NCCL_CTA_POLICY_EFFICIENCY": 1,
        "NCCL_CTA_POLICY_ZERO": 2,
    }
    _fake_torch(monkeypatch, nccl=False)
    got = REAL_TORCH_NCCL_CONFIG()
    assert got.fields == () and got.why and "no ProcessGroupNCCL" in got.why


def test_cta_table_agrees_with_the_nccl_headers_script(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """scripts/nccl_cta_table.py reads a wheel's nccl.h as NCCL writes it (a 2.31-like header here: the
    real wheels stay out of the repository) and --check holds autoccl/cta_controls.py against it."""
    header = """
#define NCCL_MAJOR 2
#define NCCL_MINOR 31
#define NCCL_PATCH 2
#define NCCL_CTA_POLICY_DEFAULT 0x00
#define NCCL_CTA_POLICY_EFFICIENCY 0x01
#define NCCL_CTA_POLICY_ZERO 0x02
typedef struct ncclConfig_v23100 {
  /* attributes that users should never touch. */
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking; int cgaClusterSize; int minCTAs; int maxCTAs; const char *netName; int splitShare;
  int CTAPolicy; int nvlsCTAs; int nChannelsPerNetPeer; int hostCftMode;
} ncclConfig_t;
typedef struct ncclConfigExt { struct ncclConfigExt* next; struct { int vendorId; } key; } ncclConfigExt_t;
typedef struct ncclCollConfig_v23100 {
  size_t size;
  unsigned int magic;
  unsigned int version;
  ncclConfigExt_t* ext;
  int minCTAs;          /* lower bound on channels/CTAs */
  int maxCTAs; int nvlsCTAs; int cgaClusterSize; const char* algSelection; int CTAPolicy;
} ncclCollConfig_t;
ncclResult_t  ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
    ncclConfig_t* config);
ncclResult_t pncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank,
    ncclConfig_t* config);
ncclResult_t  ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t* config);
ncclResult_t  ncclCommShrink(ncclComm_t comm, int* ex, int n, ncclComm_t* c, ncclConfig_t* config, int f);
ncclResult_t  ncclCommGrow(ncclComm_t comm, int n, const ncclUniqueId* id, int r, ncclComm_t* c,
    ncclConfig_t* config);
ncclResult_t ncclCommInitRankScalable(ncclComm_t* c, int n, int r, int nId, ncclUniqueId* ids,
    ncclConfig_t* config);
ncclResult_t  ncclAllReduce(const void* s, void* r, size_t count, ncclDataType_t t, ncclRedOp_t op,
    ncclComm_t comm, cudaStream_t stream);
"""
    for coll in (
        "AllReduce",
        "Broadcast",
        "Reduce",
        "AllGather",
        "ReduceScatter",
        "AlltoAll",
        "Gather",
        "Scatter",
    ):
        header += (
            f"ncclResult_t  nccl{coll}Config(const void* s, ncclComm_t c,\n    const ncclCollConfig_t* g);\n"
        )
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "nvidia_nccl_cu12-2.31.2-py3-none-manylinux_2_18_x86_64.whl", "w") as z:
        z.writestr("nvidia/nccl/include/nccl.h", header)
    script = Path(__file__).resolve().parents[2] / "scripts" / "nccl_cta_table.py"
    spec = importlib.util.spec_from_file_location("nccl_cta_table", script)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "nccl_cta_table", mod)  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    h = mod.read_header(next(wheels.iterdir()))
    assert (
        h.version == 23102
        and h.config_tag == "ncclConfig_v23100"
        and h.coll_config_tag == "ncclCollConfig_v23100"
    )
    assert h.cta(h.config_fields) == (
        "cgaClusterSize",
        "minCTAs",
        "maxCTAs",
        "CTAPolicy",
        "nvlsCTAs",
        "nChannelsPerNetPeer",
    )
    assert h.cta(h.coll_config_fields) == ("minCTAs", "maxCTAs", "nvlsCTAs", "cgaClusterSize", "CTAPolicy")
    assert h.policies == (
        ("NCCL_CTA_POLICY_DEFAULT", 0),
        ("NCCL_CTA_POLICY_EFFICIENCY", 1),
        ("NCCL_CTA_POLICY_ZERO", 2),
    )
    assert "ncclAllReduce" not in h.per_call_entry_points and len(h.per_call_entry_points) == 8
    assert mod.check([h]) == []
    wrong = dataclasses.replace(
        h, version=22809
    )  # the same header said to be 2.28.9: per-call fields it lacks
    assert any("ncclCollConfig_t CTA fields" in p for p in mod.check([wrong]))
    r = subprocess.run([sys.executable, str(script), str(wheels), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "| cu12 | 2.31.2 | `ncclConfig_v23100`: cgaClusterSize, minCTAs" in r.stdout


# ----------------------------------------------------------------------------------------------- 3. settings


@pytest.mark.parametrize(
    ("env", "args", "status", "said"),
    [
        ({}, [], D.OK, "2 set, all valid: AUTOCCL_LIB_DIR, AUTOCCL_NCCL_LIBRARY"),
        (
            {"AUTOCCL_MAX_CHANNELS": "99"},
            [],
            D.FAIL,
            "AUTOCCL_MAX_CHANNELS='99' must be an integer in [1, 64]",
        ),
        ({"AUTOCCL_MODE": "fast"}, [], D.FAIL, "AUTOCCL_MODE='fast' is not one of"),
        ({}, ["--mode", "fixed"], D.FAIL, "AUTOCCL_MODE=fixed needs AUTOCCL_FIXED"),
        ({"AUTOCCL_SPECULAT": "on"}, [], D.WARN, "did you mean AUTOCCL_SPECULATE?"),
        ({"AUTOCCL_GUARD": "off"}, [], D.OK, "3 set, all valid: AUTOCCL_GUARD, "),
    ],
)
def test_settings(
    built_plugin: Path,
    monkeypatch: pytest.MonkeyPatch,
    env: dict[str, str],
    args: list[str],
    status: str,
    said: str,
) -> None:
    # the same variables whether the plugin comes from AUTOCCL_LIB_DIR or from the installed package (CI)
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(built_plugin.parent))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    code, checks, _ = _doctor(*args)
    check = checks["settings"]
    assert check.status == status and said in check.detail, check
    assert code == (1 if status == D.FAIL else 0)
    if status != D.OK:
        assert check.fix


# ------------------------------------------------------------------------------------------ 4. GPUs, 5. NVLS


def test_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    check = D.check_gpus(D.find_gpus(), os.environ)
    assert check.status == D.WARN and "no NVIDIA driver" in check.detail and "autoccl demo" in check.detail
    _gpus(tmp_path, monkeypatch)
    check = D.check_gpus(D.find_gpus(), os.environ)
    assert check.status == D.OK and check.detail.startswith("2 x NVIDIA H200"), check
    monkeypatch.setattr(D, "torch_gpus", lambda: ("2.9.0+cpu", 0))
    check = D.check_gpus(D.find_gpus(), os.environ)
    assert check.status == D.WARN and "torch 2.9.0+cpu sees 0" in check.detail


def test_multicast_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    check = D.check_multicast(os.environ)
    assert check.status == D.OK and "NCCL_NVLS_ENABLE=0" in check.detail
    assert check.data["job"]["NCCL_NVLS_ENABLE"] == "0"
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    check = D.check_multicast(os.environ)
    assert check.status == D.WARN and "NCCL_NVLS_ENABLE=1" in check.detail and check.fix


# -------------------------------------------------------------------------------------------------- 6. cache


def _table(cache: Path, gpu: str = "NVIDIA H200", gpus: int = 2, nccl: int = 22809) -> str:
    meta = {"gpu": gpu, "gpus": str(gpus), "nccl": str(nccl), "ranks": "2", "nodes": "1", "nvl_domains": "1"}
    task = {"coll": "allreduce", "bytes": "1048576", "algo": "ring", "proto": "simple", "channels": "0"}
    table = tables.Table(tables.fingerprint_of(meta), meta, [task])
    tables.write_table_atomic(table, tables.tables_dir(str(cache)) / f"{table.fingerprint}.table")
    return table.fingerprint


def test_cache_finds_the_table_of_this_machine(
    fake_nccl: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gpus(tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    cache = tmp_path / "cache"
    mine = _table(cache)
    _table(cache, gpus=8)  # another machine's
    _table(cache, nccl=23007)  # this machine under another NCCL
    nccl = D.NcclInfo(str(fake_nccl), str(fake_nccl), 22809)
    options = D.DoctorOptions(cache_dir=str(cache))
    check = D.check_cache(options, os.environ, "online", D.find_gpus(), nccl)
    assert check.status == D.OK, check
    assert check.data["tables"] == 3
    assert [t["fingerprint"] for t in check.data["machine_tables"]] == [mine]
    assert "for this machine (NVIDIA H200 x 2, NCCL 2.28.9): 1" in check.detail
    # AUTOCCL_HW names the machine as the library then does
    monkeypatch.setenv("AUTOCCL_HW", "NVIDIA H200x8")
    check = D.check_cache(options, os.environ, "online", D.find_gpus(), None)
    assert len(check.data["machine_tables"]) == 1 and check.data["machine"]["gpus"] == 8


def test_cache_in_table_mode_without_a_table_warns(built_plugin: Path, tmp_path: Path) -> None:
    code, checks, _ = _doctor("--mode", "table", "--cache-dir", str(tmp_path / "new"))
    assert code == 0
    assert checks["cache"].status == D.WARN and "table mode applies nothing" in checks["cache"].detail
    code, checks, _ = _doctor("--mode", "online", "--cache-dir", str(tmp_path / "new"))
    assert checks["cache"].status == D.OK and checks["cache"].data["writable"] is True


def test_cache_that_is_a_file_fails(built_plugin: Path, tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    code, checks, _ = _doctor("--cache-dir", str(tmp_path / "file"))
    assert code == 1 and checks["cache"].status == D.FAIL and "is not a directory" in checks["cache"].detail


def test_cache_with_an_unreadable_table_warns(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _table(cache)
    (tables.tables_dir(str(cache)) / ("0" * 16 + ".table")).write_text("not a table\n")
    check = D.check_cache(D.DoctorOptions(cache_dir=str(cache)), os.environ, "online", D.find_gpus(), None)
    assert check.status == D.WARN and "1 unreadable" in check.detail


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_cache_not_writable_warns(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    check = D.check_cache(D.DoctorOptions(cache_dir=str(locked)), os.environ, "online", D.find_gpus(), None)
    assert check.status == D.WARN and "not writable" in check.detail


def test_cache_behind_a_file_fails(tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("")
    behind = tmp_path / "afile" / "cache"
    check = D.check_cache(D.DoctorOptions(cache_dir=str(behind)), os.environ, "online", D.find_gpus(), None)
    assert check.status == D.FAIL
    assert "must be a directory or a new one in an existing directory" in check.detail
    assert check.data["writable"] is False


def test_cache_option_that_run_refuses_fails(built_plugin: Path, tmp_path: Path) -> None:
    """A --cache-dir whose folder does not exist: `autoccl run --cache-dir` refuses it and the library loads
    no tuner under it (AUTOCCL_CACHE_DIR), where doctor said ok and exited 0."""
    missing = tmp_path / "missing" / "cache"
    code, checks, _ = _doctor("--cache-dir", str(missing))
    assert code == 1 and checks["cache"].status == D.FAIL, checks["cache"]
    assert checks["cache"].detail.startswith(f"--cache-dir {missing}: AUTOCCL_CACHE_DIR="), checks["cache"]
    assert "autoccl run" in (checks["cache"].fix or "")
    r = CliRunner().invoke(main, ["env", "--mode", "off", "--cache-dir", str(missing)])
    assert r.exit_code == 1 and "must be a directory or a new one in an existing directory" in r.output
    # a new folder in an existing one is what run takes
    code, checks, _ = _doctor("--cache-dir", str(tmp_path / "new"))
    assert checks["cache"].status == D.OK, checks["cache"]


# --------------------------------------------------------------------------------------- 7. the communicator


def test_parse_nccl_2_28_lines() -> None:
    load = D.parse_plugin_log(TOOK_2_28)
    assert load.tuners == [("autoccl", 5)] and load.profilers == [("autoccl", 5)]
    assert load.loaded_from == {"tuner": LIB, "profiler": LIB}
    assert load.given == {"tuner": LIB, "profiler": LIB}
    assert load.refused == []  # "Closing ..." lines are no refusal
    check = D.judge_plugin_load(load, "autoccl", (5, 5), ranks=1)
    assert (
        check.status == D.OK and check.detail == "NCCL took tuner v5 and profiler v5 from autoccl over 1 GPU"
    )


def test_parse_lines_of_2_32_and_of_several_ranks() -> None:
    log = TOOK_2_28.replace("(v5)", "(v7)", 1).replace("Using autoccl (v5)", "Using autoccl (v6)")
    log += log.replace("[0]", "[1]").replace("4443", "4444")
    load = D.parse_plugin_log(log)
    assert load.tuners == [("autoccl", 6)] * 2 and load.profilers == [("autoccl", 7)] * 2
    assert D.judge_plugin_load(load, "autoccl", (6, 7), ranks=2).status == D.OK
    # a version other than the table's: said, not failed
    check = D.judge_plugin_load(load, "autoccl", (6, 6), ranks=2)
    assert check.status == D.WARN and "profiler v6" in check.detail


def test_parse_no_plugin_loaded() -> None:
    load = D.parse_plugin_log(NONE_LOADED)
    assert load.tuners == [] and load.profilers == []
    assert load.refused == [
        "PROFILER/Plugin: Could not find: /gone/libautoccl-nccl.so",
        "TUNER/Plugin: Could not find: /gone/libautoccl-nccl.so",
    ]
    check = D.judge_plugin_load(load)
    assert check.status == D.FAIL and "uses its internal tuner" in check.detail
    assert "Could not find: /gone/libautoccl-nccl.so" in check.detail and check.fix
    load = D.parse_plugin_log(UNSUPPORTED)
    assert D.judge_plugin_load(load).status == D.FAIL
    assert "External tuner plugin /x/libold.so is unsupported" in load.refused
    # nothing about plugins at all: NCCL never saw the variables
    check = D.judge_plugin_load(D.parse_plugin_log("vm:1:1 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"))
    assert check.status == D.FAIL and "did not see NCCL_TUNER_PLUGIN" in str(check.fix)


def test_parse_another_tuner_or_no_profiler() -> None:
    other = TOOK_2_28.replace("Using autoccl (v5)", "Using NET_PLUGIN_TUNER (v5)")
    check = D.judge_plugin_load(D.parse_plugin_log(other), "autoccl")
    assert check.status == D.FAIL and "NET_PLUGIN_TUNER, not autoccl" in check.detail
    no_profiler = "\n".join(ln for ln in TOOK_2_28.splitlines() if "PROFILER/Plugin: Loaded" not in ln)
    no_profiler += (
        "\nvm:1:1 [0] NCCL INFO Profiler init failed with error '3': Success. Continue without profiler.\n"
    )
    check = D.judge_plugin_load(D.parse_plugin_log(no_profiler), "autoccl", (5, 5))
    assert check.status == D.WARN and "no profiler" in check.detail and "Profiler init failed" in check.detail


@pytest.mark.parametrize(
    ("version", "took"), [("22809", "tuner v5 and profiler v5"), ("23203", "tuner v6 and profiler v7")]
)
def test_communicator_through_a_stand_in_nccl(
    built_plugin: Path,
    fake_nccl: Path,
    fake_cuda_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    version: str,
    took: str,
) -> None:
    """The whole check: GPUs here, NCCL found, the child creates its communicator over the visible GPUs (a
    stand-in CUDA driver counts 2) with the real plugin loaded in mode off, and NCCL's log is read."""
    _gpus(tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setenv("FAKE_NCCL_VERSION", version)
    monkeypatch.setenv(
        "LD_LIBRARY_PATH",
        os.pathsep.join(filter(None, [str(fake_cuda_dir), os.environ.get("LD_LIBRARY_PATH")])),
    )
    code, checks, _ = _doctor()
    check = checks["communicator"]
    assert check.status == D.OK, check
    assert check.detail == f"NCCL took {took} from autoccl over 2 GPUs"
    assert check.data["given"] == {"tuner": str(built_plugin), "profiler": str(built_plugin)}
    assert code == 0


def test_communicator_that_nccl_cannot_create_fails(
    built_plugin: Path, fake_nccl: Path, fake_cuda_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _gpus(tmp_path, monkeypatch)
    monkeypatch.setenv("AUTOCCL_NCCL_LIBRARY", str(fake_nccl))
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_cuda_dir))
    monkeypatch.setenv("FAKE_NCCL_FAIL", "1")
    code, checks, _ = _doctor()
    assert code == 1
    check = checks["communicator"]
    assert check.status == D.FAIL and "ncclCommInitAll over 2 GPUs failed" in check.detail
    code, checks, _ = _doctor("--no-gpu-check")
    assert code == 0 and checks["communicator"].status == D.SKIPPED
    assert checks["communicator"].detail == "--no-gpu-check"


def test_communicator_env_loads_the_plugin_in_mode_off(
    built_plugin: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOCCL_MODE", "online")
    monkeypatch.setenv("AUTOCCL_TABLE", "/tmp/t.table")
    monkeypatch.setenv("NCCL_DEBUG_FILE", "/tmp/nccl.%p.log")  # the log must reach the child's stdout
    child = D.communicator_env(os.environ)
    assert child["AUTOCCL_MODE"] == "off" and "AUTOCCL_TABLE" not in child
    assert child["NCCL_TUNER_PLUGIN"] == child["NCCL_PROFILER_PLUGIN"] == str(built_plugin)
    assert child["NCCL_DEBUG"] == "INFO" and child["NCCL_DEBUG_SUBSYS"] == "INIT,TUNING,ENV"
    assert "NCCL_DEBUG_FILE" not in child
    assert child["NCCL_NVLS_ENABLE"] == "0" and "AUTOCCL_RUN_ADDR" not in child


# ------------------------------------------------------------------------------------------------ the report


def test_json_report_schema(built_plugin: Path) -> None:
    r = CliRunner().invoke(main, ["doctor", "--json"])
    doc = json.loads(r.stdout)
    assert set(doc) == {"schema", "autoccl", "mode", "ok", "counts", "checks"}
    assert doc["schema"] == 1 and doc["mode"] == "online"
    names = [c["name"] for c in doc["checks"]]
    assert names == ["plugin", "nccl", "cta", "settings", "gpus", "nvls", "cache", "communicator"]
    for c in doc["checks"]:
        assert set(c) == {"name", "title", "status", "detail", "fix", "data"}
        assert c["status"] in D.STATUSES and isinstance(c["detail"], str) and c["detail"]
        assert (c["fix"] is not None) == (c["status"] in (D.WARN, D.FAIL)), c
        assert isinstance(c["data"], dict)
    assert doc["counts"] == {s: sum(c["status"] == s for c in doc["checks"]) for s in D.STATUSES}
    assert doc["ok"] == (doc["counts"]["fail"] == 0) == (r.exit_code == 0)
    # no GPU and no NCCL here (the fixture): warnings, the communicator skipped, nothing failed
    assert r.exit_code == 0, r.output
    statuses = {c["name"]: c["status"] for c in doc["checks"]}
    assert statuses["gpus"] == statuses["nccl"] == D.WARN and statuses["communicator"] == D.SKIPPED
    assert statuses["cta"] == D.SKIPPED


def test_table_output_and_exit_codes(built_plugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    r = CliRunner().invoke(main, ["doctor"])
    assert r.exit_code == 0, r.output
    for title in ("plugin library", "NCCL library", "AUTOCCL_* settings", "GPUs", "NVLink multicast off"):
        assert title in r.stdout
    assert "nothing failed" in r.stdout and "→ run `autoccl doctor` on the machine" in r.stdout
    monkeypatch.setenv("AUTOCCL_MAX_CHANNELS", "0")
    r = CliRunner().invoke(main, ["doctor", "--mode", "observe"])
    assert r.exit_code == 1 and "a check failed" in r.stdout and "--mode observe" in r.stdout
