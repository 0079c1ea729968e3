"""How many channels does NCCL give a plain communicator on this host? (`--nccl-channels auto`)

With `--channel-ceiling` every communicator is created with more channels than NCCL would choose, and
NCCL's own choice for a call then spreads over all of them. The plugin caps calls it leaves to NCCL at
the plain count (`AUTOCCL_NCCL_CHANNELS`), but it cannot learn that count inside a raised communicator:
NCCL tells a tuner neither the count nor the topology search result. So the launcher asks NCCL once,
before the job starts: a child process creates one communicator over this host's GPUs with the job's
environment minus our settings, and reads NCCL's own INFO line "<N> coll channels".

The child is a separate process so that NCCL's threads, CUDA contexts and log output stay out of the
launcher; its output is NCCL's log on stdout plus one result line of ours. `autoccl doctor` creates its
communicator (the plugin loaded, to read which interfaces NCCL took) through the same child
(`create_communicator`).
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


def version_text(code: int) -> str:
    """NCCL's version code as NCCL prints it: NCCL >= 2.9 encodes major*10000 + minor*100 + patch."""
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


def nccl_version_code(library: str) -> int:
    """ncclGetVersion of `library`, loaded into this process (no communicator, no GPU asked)."""
    try:
        nccl = ctypes.CDLL(library)
    except OSError as e:
        raise ProbeError(f"cannot load NCCL from {library}: {e}") from None
    try:
        get_version = nccl.ncclGetVersion
    except AttributeError:
        raise ProbeError(f"{library} has no ncclGetVersion: not an NCCL library") from None
    version = ctypes.c_int(0)
    status = get_version(ctypes.byref(version))
    if status != 0 or version.value <= 0:
        raise ProbeError(f"ncclGetVersion of {library} failed (status {status})")
    return int(version.value)


@dataclass(frozen=True)
class CommunicatorLog:
    """What a child process that created one communicator saw: NCCL's log (stdout and stderr) and ours."""

    log: str
    ranks: int
    library: str
    nccl_version: str


def create_communicator(
    library: str,
    child_env: Mapping[str, str],
    gpus: int | None = None,
    *,
    min_ranks: int = 2,
    timeout_s: float = 120.0,
) -> CommunicatorLog:
    """In a child process with environment `child_env`, load NCCL from `library` and create one communicator
    over `gpus` local GPUs (default: every visible one, at least `min_ranks`); return its output. The child is
    a separate process so that NCCL's threads, CUDA contexts, plugins and log stay out of this one."""
    cmd = [sys.executable, "-m", "autoccl.nccl_probe", "--library", library, "--min-ranks", str(min_ranks)]
    if gpus is not None:
        cmd += ["--gpus", str(gpus)]
    try:
        done = subprocess.run(
            cmd, env=dict(child_env), capture_output=True, text=True, timeout=timeout_s, check=False
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
    return CommunicatorLog(
        log=output,
        ranks=int(result["ranks"]),
        library=str(result["library"]),
        nccl_version=str(result["nccl_version"]),
    )


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
    done = create_communicator(library, child_env, gpus, timeout_s=timeout_s)
    return ProbeResult(
        channels=parse_coll_channels(done.log),
        ranks=done.ranks,
        library=done.library,
        nccl_version=done.nccl_version,
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


def _child(library: str, gpus: int | None, min_ranks: int = 2) -> int:
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
    try:
        ranks = gpus if gpus is not None else _visible_gpus()
    except ProbeError as e:
        print(str(e), file=sys.stderr)
        return 2
    if ranks < min_ranks:
        print(
            f"{ranks} GPU visible: a communicator of one rank does not show the job's channel count; "
            "the probe needs at least 2"
            if min_ranks == 2
            else f"{ranks} GPUs visible: the probe needs at least {min_ranks}",
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
    result = {"ranks": ranks, "library": library, "nccl_version": version_text(version.value)}
    print(RESULT_TAG + json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="(internal) the --nccl-channels auto probe process")
    parser.add_argument("--library", required=True)
    parser.add_argument("--gpus", type=int, default=None)
    parser.add_argument("--min-ranks", type=int, default=2)
    args = parser.parse_args(argv)
    return _child(args.library, args.gpus, args.min_ranks)


if __name__ == "__main__":
    sys.exit(main())
