"""How many channels does NCCL give a plain communicator on this host? (`--nccl-channels auto`)

With `--channel-ceiling` every communicator is created with more channels than NCCL would choose, and
NCCL's own choice for a call then spreads over all of them. The plugin caps calls it leaves to NCCL at
the plain count (`AUTOCCL_NCCL_CHANNELS`), but it cannot learn that count inside a raised communicator:
NCCL tells a tuner neither the count nor the topology search result. So the launcher asks NCCL once,
before the job starts: a child process creates one communicator over this host's GPUs with the job's
environment minus our settings, and reads NCCL's own INFO line "<N> coll channels".

The child is a separate process so that NCCL's threads, CUDA contexts and log output stay out of the
launcher; its output is NCCL's log on stdout plus one result line of ours.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from autoccl.tuner_env import plain_nccl_env

LIBRARY_VAR = "AUTOCCL_NCCL_LIBRARY"
RESULT_TAG = "AUTOCCL_PROBE_RESULT "
CEILING_VARS = ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS")
_COLL_CHANNELS = re.compile(r"NCCL INFO (\d+) coll channels")


class ProbeError(RuntimeError):
    """The probe could not tell the plain channel count; the message says why and what to do instead."""


@dataclass(frozen=True)
class ProbeResult:
    channels: int
    ranks: int
    library: str
    nccl_version: str


def parse_coll_channels(log: str) -> int:
    """The channel count NCCL printed for the probe's communicator (one line per rank, all equal)."""
    counts = {int(m.group(1)) for m in _COLL_CHANNELS.finditer(log)}
    if not counts:
        raise ProbeError("NCCL printed no '<N> coll channels' line (its INIT log differs from NCCL 2.28's?)")
    if len(counts) > 1:
        # NCCL agrees on one count across a communicator's ranks; anything else is a log we misread.
        raise ProbeError(f"NCCL printed different channel counts for one communicator: {sorted(counts)}")
    return counts.pop()


def find_nccl_library(env: Mapping[str, str] | None = None) -> str:
    """The NCCL the probe loads: AUTOCCL_NCCL_LIBRARY, else the `nvidia-nccl` wheel PyTorch uses,
    else the system's libnccl.so.2 (the dynamic loader's search)."""
    src = os.environ if env is None else env
    given = src.get(LIBRARY_VAR)
    if given:
        if not Path(given).is_file():
            raise ProbeError(f"{LIBRARY_VAR}={given} is not a file")
        return given
    try:
        spec = importlib.util.find_spec("nvidia.nccl")
    except ModuleNotFoundError:
        spec = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        wheel_lib = Path(location) / "lib" / "libnccl.so.2"
        if wheel_lib.is_file():
            return str(wheel_lib)
    return ctypes.util.find_library("nccl") or "libnccl.so.2"


def probe_plain_channels(
    gpus: int | None = None,
    *,
    env: Mapping[str, str] | None = None,
    timeout_s: float = 120.0,
) -> ProbeResult:
    """Create one plain communicator over `gpus` local GPUs (default: every visible one) and return the
    channel count NCCL gave it. `env` is the job's environment; our own variables are removed from it."""
    base = os.environ if env is None else env
    library = find_nccl_library(base)
    child_env = plain_nccl_env(base)
    # `--channel-ceiling` sets these (also in a shell that ran `autoccl env`); the probe measures without.
    for key in CEILING_VARS:
        child_env.pop(key, None)
    # INIT is the subsystem that prints the count; the result line is ours and comes last.
    child_env.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT"})
    child_env.pop("NCCL_DEBUG_FILE", None)
    cmd = [sys.executable, "-m", "autoccl.nccl_probe", "--library", library]
    if gpus is not None:
        cmd += ["--gpus", str(gpus)]
    try:
        done = subprocess.run(
            cmd, env=child_env, capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except subprocess.TimeoutExpired as e:
        raise ProbeError(f"NCCL did not create the probe communicator within {timeout_s:.0f} s") from e
    output = done.stdout + done.stderr
    if done.returncode != 0:
        tail = "\n".join(output.strip().splitlines()[-5:])
        raise ProbeError(f"the probe process failed (exit {done.returncode}):\n{tail}")
    result_lines = [ln for ln in done.stdout.splitlines() if ln.startswith(RESULT_TAG)]
    if not result_lines:
        raise ProbeError("the probe process ended without a result")
    result = json.loads(result_lines[-1][len(RESULT_TAG) :])
    return ProbeResult(
        channels=parse_coll_channels(output),
        ranks=int(result["ranks"]),
        library=str(result["library"]),
        nccl_version=str(result["nccl_version"]),
    )


def _visible_gpus() -> int:
    """GPUs the CUDA driver shows this process (CUDA_VISIBLE_DEVICES applies)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        raise ProbeError(f"no CUDA driver on this machine ({e})") from e
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        raise ProbeError("the CUDA driver reports no usable GPU")
    return count.value


def _child(library: str, gpus: int | None) -> int:
    """Runs in the probe process: one communicator over `gpus` local GPUs, then the result line."""
    try:
        nccl = ctypes.CDLL(library)
    except OSError as e:
        print(
            f"cannot load NCCL from {library}: {e} (set {LIBRARY_VAR} to the job's libnccl.so.2)",
            file=sys.stderr,
        )
        return 2
    nccl.ncclGetErrorString.restype = ctypes.c_char_p
    version = ctypes.c_int(0)
    nccl.ncclGetVersion(ctypes.byref(version))
    v = version.value
    # NCCL >= 2.9 encodes major*10000 + minor*100 + patch.
    version_text = f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    try:
        ranks = gpus if gpus is not None else _visible_gpus()
    except ProbeError as e:
        print(str(e), file=sys.stderr)
        return 2
    if ranks < 2:
        print(
            f"{ranks} GPU visible: a communicator of one rank does not show the job's channel count; "
            "the probe needs at least 2",
            file=sys.stderr,
        )
        return 2
    comms = (ctypes.c_void_p * ranks)()
    status = nccl.ncclCommInitAll(comms, ranks, None)
    if status != 0:
        print(
            f"ncclCommInitAll over {ranks} GPUs failed: {nccl.ncclGetErrorString(status).decode()}",
            file=sys.stderr,
        )
        return 3
    for comm in comms:
        nccl.ncclCommDestroy(comm)
    sys.stdout.flush()
    print(RESULT_TAG + json.dumps({"ranks": ranks, "library": library, "nccl_version": version_text}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="(internal) the --nccl-channels auto probe process")
    parser.add_argument("--library", required=True)
    parser.add_argument("--gpus", type=int, default=None)
    args = parser.parse_args(argv)
    return _child(args.library, args.gpus)


if __name__ == "__main__":
    sys.exit(main())
