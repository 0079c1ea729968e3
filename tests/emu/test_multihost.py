"""Two "hosts" on one machine, launched the way the README says: `autoccl run` on each host in front of
the launcher, under torchrun's multi-node arguments (`--nnodes 2 --node-rank i --master-addr`) and under
Slurm's variables (a step over the node list `127.0.0.[2-3]`). Each host is its own process group, its
rank processes are the real library in the NCCL emulator, and its `autoccl run` gives it a coordinator of
its own (AUTOCCL_RUN_ADDR on 127.0.0.1, another port per host): the library must prefer the launcher's
variables, so that every host meets at one coordinator, on 127.0.0.2 (host A's address), with a token
derived from the job's identity.

Checked: 0 divergent decisions across the hosts, and the multi-node communicator tuned (host B applied
the configurations host A's authority searched). When the hosts disagree (another AUTOCCL_COORD_SECRET on
one host, or one host naming another coordinator), every host fails with a sentence saying why, and none
applies a configuration the other did not.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

import pytest
from emu_helpers import assert_default

import autoccl
from autoccl.emu import Call, Comm, Group, Scenario, run
from autoccl.emu.runner import default_model, find_divergences
from autoccl.tuner_env import free_port, plain_nccl_env

HOST_A, HOST_B = "127.0.0.2", "127.0.0.3"
PYTHON_DIR = (
    Path(__file__).resolve().parents[2] / "python"
)  # the autoccl CLI each host runs (benchmarks/emu/multihost_runs.py sets another)
RANKS = {HOST_A: (0, 1), HOST_B: (2, 3)}
WORLD_HASH = 0xA11C0DE


def _scenario() -> Scenario:
    comms = [
        Comm("world", WORLD_HASH, (0, 1, 2, 3), nnodes=2),
        Comm("host_a", 0xA0, (0, 1)),
        Comm("host_b", 0xB0, (2, 3)),
    ]
    groups = [
        Group("world", (Call("allreduce", 8 << 20),), repeat=160),
        Group("world", (Call("allgather", 32 << 20),), repeat=160),
        Group("host_a", (Call("allreduce", 4 << 20),), repeat=60),
        Group("host_b", (Call("allreduce", 4 << 20),), repeat=60),
    ]
    return Scenario(comms, groups, seed=11, lead=8)


def _loopback_usable() -> bool:
    try:
        with socket.socket() as s:
            s.bind((HOST_A, 0))
        return True
    except OSError:
        return False


pytestmark = pytest.mark.skipif(not _loopback_usable(), reason=f"cannot bind {HOST_A} (loopback 127.0.0.0/8)")


def _emu_command(emulator: Path, plugin: Path, work: Path, rank_var: str) -> str:
    """The rank process: the emulator playing the global rank the launcher gives in `rank_var`."""
    cmd = [str(emulator), "--scenario", str(work / "scenario.txt"), "--plugin", str(plugin)]
    model = default_model()
    if model is not None:
        cmd += ["--model", str(model)]
    cmd += ["--lead-file", str(work / "lead.bin"), "--verbose"]
    rank = f'"${rank_var}"'
    return (
        " ".join(shlex.quote(c) for c in cmd)
        + f" --ranks {rank} --truth {shlex.quote(str(work))}/truth.{rank}.jsonl"
    )


def _autoccl_run(work: Path, extra_env: Mapping[str, str]) -> tuple[list[str], dict[str, str]]:
    env = plain_nccl_env()
    # The job's own table cache: a table another run left in the user's cache would settle the tasks from it
    # (NCCL's choice, final) and host B would apply no searched configuration.
    env["AUTOCCL_CACHE_DIR"] = str(work / "cache")
    if os.environ.get("AUTOCCL_LIB_DIR"):  # the build under test (autoccl run finds the plugin there)
        env["AUTOCCL_LIB_DIR"] = os.environ["AUTOCCL_LIB_DIR"]
    # The autoccl these tests import (installed, or the checkout's python/ beside AUTOCCL_LIB_DIR): the
    # checkout's python/ alone has no compiled library.
    env["PYTHONPATH"] = (
        str(Path(autoccl.__file__).resolve().parents[1]) + os.pathsep + env.get("PYTHONPATH", "")
    )
    env.update({"AUTOCCL_HW": "NVIDIA H200x4", "AUTOCCL_COORD_TIMEOUT_MS": "4000", "AUTOCCL_RECHECK_MS": "0"})
    env.update(extra_env)
    return [sys.executable, "-m", "autoccl", "run", "--mode", "online", "--"], env


def _run_hosts(
    work: Path, launchers: dict[str, tuple[list[str], dict[str, str]]], timeout: float
) -> dict[str, int]:
    """Starts each host's launcher in a process group of its own; returns their exit codes."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for host, (argv, env) in launchers.items():
            with (work / f"host-{host}.out").open("wb") as out:
                procs[host] = subprocess.Popen(
                    argv, env=env, stdout=out, stderr=subprocess.STDOUT, cwd=work, start_new_session=True
                )
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs.values()) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    return {h: p.returncode for h, p in procs.items()}


def _calls(work: Path) -> list[dict[str, object]]:
    out = []
    for f in sorted(work.glob("truth.*.jsonl")):
        for line in f.read_text().splitlines():
            rec = json.loads(line)
            if rec.get("ev") == "call":
                out.append(rec)
    return out


def _torchrun_hosts(
    work: Path, emulator: Path, plugin: Path, per_host: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, tuple[list[str], dict[str, str]]]:
    port = free_port(HOST_A)
    out = {}
    for node, host in enumerate((HOST_A, HOST_B)):
        run, env = _autoccl_run(work, (per_host or {}).get(host, {}))
        nodes = ["--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "2"]
        master = ["--master-addr", HOST_A, "--master-port", str(port), "--max-restarts", "0"]
        rank = ["--no-python", "sh", "-c", "exec " + _emu_command(emulator, plugin, work, "RANK")]
        torchrun = [sys.executable, "-m", "torch.distributed.run", *nodes, *master, *rank]
        out[host] = ([*run, *torchrun], env)
    return out


def _slurm_hosts(
    work: Path, emulator: Path, plugin: Path, per_host: Mapping[str, Mapping[str, str]] | None = None
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """What srun gives the tasks of a two-node step: each host's launcher (`autoccl run -- python -c ...`)
    starts its two tasks with SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID and the step's node list."""
    job = str(os.getpid() * 1000 + int(time.time()) % 1000)
    out = {}
    for node, host in enumerate((HOST_A, HOST_B)):
        run, env = _autoccl_run(
            work,
            {
                "SLURM_JOB_ID": job,
                "SLURM_STEP_ID": "0",
                "SLURM_NTASKS": "4",
                "SLURM_NNODES": "2",
                "SLURM_STEP_NODELIST": "127.0.0.[2-3]",
                "SLURM_NODEID": str(node),
                **(per_host or {}).get(host, {}),
            },
        )
        command = _emu_command(emulator, plugin, work, "SLURM_PROCID")
        tasks = "; ".join(
            f"e = dict(os.environ, SLURM_PROCID='{r}', SLURM_LOCALID='{i}'); "
            f"ps.append(subprocess.Popen(['sh', '-c', 'exec ' + {command!r}], env=e))"
            for i, r in enumerate(RANKS[host])
        )
        script = f"import os, subprocess, sys; ps = []; {tasks}; sys.exit(max(p.wait() for p in ps))"
        out[host] = ([*run, sys.executable, "-c", script], env)
    return out


def _prepare(tmp_path: Path) -> Path:
    work = tmp_path / "job"
    work.mkdir()
    (work / "scenario.txt").write_text(_scenario().to_text())
    return work


def _check_agreement(work: Path, codes: dict[str, int]) -> None:
    logs = {h: (work / f"host-{h}.out").read_text(errors="replace") for h in codes}
    assert all(c == 0 for c in codes.values()), {h: logs[h][-3000:] for h in codes}
    calls = _calls(work)
    assert calls
    assert find_divergences(calls) == []
    served = [
        line
        for text in logs.values()
        for line in text.splitlines()
        if "serving the online coordinator" in line
    ]
    assert len(served) == 1 and f"at {HOST_A}:" in served[0], served
    # the communicator across the hosts was tuned from host A's authority, and host B applied it
    world = [c for c in calls if c["hash"] == f"{WORLD_HASH:016x}"]
    per_rank = {r: sum(1 for c in world if c["rank"] == r) for r in range(4)}
    assert len(set(per_rank.values())) == 1 and per_rank[0] == 320, per_rank
    tuned_b = [c for c in world if c["grank"] in RANKS[HOST_B] and (c["algo"], c["proto"], c["channels"]) != (
        c["def_algo"], c["def_proto"], c["def_channels"])]  # fmt: skip
    assert tuned_b, "host B never applied a configuration of the search"


REJECTED = "rejected this process's token"
NEVER_CONNECTED = "never connected to this coordinator"


def _check_loud_failure(work: Path, codes: dict[str, int], must_see: str) -> None:
    """Every host exits non-zero with a sentence saying why (one of the two reasons: on one machine either
    host's process may be the one that binds 127.0.0.2, so which host is turned away is not fixed); some
    host says `must_see`; nothing applied diverges and no call of the shared communicator ran."""
    seen = []
    for host, code in codes.items():
        log = (work / f"host-{host}.out").read_text(errors="replace")
        assert code != 0, f"host {host} exited 0:\n{log[-3000:]}"
        reasons = [r for r in (REJECTED, NEVER_CONNECTED) if r in log]
        assert reasons, f"host {host}:\n{log[-3000:]}"
        seen += reasons
    assert must_see in seen
    assert find_divergences(_calls(work)) == []
    world = [c for c in _calls(work) if c["hash"] == f"{WORLD_HASH:016x}"]
    assert not world, "a call of the communicator across the hosts ran although the hosts disagree"


@pytest.mark.slow
def test_torchrun_two_hosts_agree(emulator: Path, plugin: Path, tmp_path: Path) -> None:
    work = _prepare(tmp_path)
    codes = _run_hosts(work, _torchrun_hosts(work, emulator, plugin), timeout=240)
    _check_agreement(work, codes)


@pytest.mark.slow
def test_slurm_two_hosts_agree(emulator: Path, plugin: Path, tmp_path: Path) -> None:
    work = _prepare(tmp_path)
    codes = _run_hosts(work, _slurm_hosts(work, emulator, plugin), timeout=240)
    _check_agreement(work, codes)


@pytest.mark.slow
def test_torchrun_hosts_with_other_secrets_fail_loudly(emulator: Path, plugin: Path, tmp_path: Path) -> None:
    """Host B derives another token (another AUTOCCL_COORD_SECRET): the coordinator turns its processes
    away; host A's ranks get no decision for the communicator they share with B's (B's ranks never
    attached), so both fail at their deadline, each with a sentence."""
    work = _prepare(tmp_path)
    hosts = _torchrun_hosts(work, emulator, plugin, {HOST_B: {"AUTOCCL_COORD_SECRET": "another secret"}})
    codes = _run_hosts(work, hosts, timeout=240)
    _check_loud_failure(work, codes, REJECTED)


@pytest.mark.slow
def test_slurm_hosts_with_other_coordinators_fail_loudly(
    emulator: Path, plugin: Path, tmp_path: Path
) -> None:
    """Host B is told another coordinator (AUTOCCL_COORD_ADDR on its host only): each host meets at its
    own, neither hands out a decision of the communicator whose other ranks are at the other one, and
    both fail with a sentence instead of tuning it two ways."""
    work = _prepare(tmp_path)
    other = {"AUTOCCL_COORD_ADDR": f"{HOST_B}:{free_port(HOST_B)}", "AUTOCCL_COORD_SECRET": "s"}
    codes = _run_hosts(work, _slurm_hosts(work, emulator, plugin, {HOST_B: other}), timeout=240)
    _check_loud_failure(work, codes, NEVER_CONNECTED)


def test_one_host_coordinator_on_a_multi_node_communicator_is_refused_and_traced(
    plugin: Path, tmp_path: Path
) -> None:
    """`autoccl run`'s loopback coordinator cannot serve a communicator on two nodes (each host would meet
    at its own): every rank keeps NCCL's choice and, as NCCL prints no WARN unless NCCL_DEBUG asks, the
    trace says why on every rank."""
    scenario = Scenario(
        [Comm("world", WORLD_HASH, (0, 1, 2, 3), nnodes=2)],
        [Group("world", (Call("allreduce", 8 << 20),), repeat=40)],
        seed=3,
    )
    env = {
        "AUTOCCL_MODE": "online",
        "AUTOCCL_RUN_ADDR": f"127.0.0.1:{free_port()}",
        "AUTOCCL_RUN_TOKEN": "t" * 32,
        "AUTOCCL_HW": "NVIDIA H200x4",
    }
    res = run(scenario, plugin=plugin, env=env, workdir=tmp_path)
    assert all(c == 0 for c in res.returncodes), res.stderr[-2000:]
    assert_default(res.calls)
    refusals = [r for r in res.trace if r.get("ev") == "no_tuner"]
    assert sorted(int(r["rank"]) for r in refusals) == [0, 1, 2, 3], refusals
    for r in refusals:
        assert r["comm"] == f"{WORLD_HASH:016x}"
        assert "each host would meet at its own coordinator" in str(r["why"]), r
    assert not [r for r in res.trace if r.get("ev") == "call"]
