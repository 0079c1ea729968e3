"""--hosts-on-one-gpu: every local rank on GPU 0, each a host of its own to NCCL (NCCL_HOSTID, sockets over
loopback) and to detection (AUTOCCL_TOPO_HOST), set in the rank's process before its process group starts.
Here on CPU ranks (gloo): the variables each rank sees, the ranks the commands start on a machine of one GPU
(as torch is told), the detected topology of two hosts sharing one GPU, and a check end to end."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import adaptive_workers as W
import pytest
import yaml
from click.testing import CliRunner
from fake_nvml import hgx_slice, pcie_only

from autoccl.adaptive import launch
from autoccl.adaptive.detect import RankReport, build_topology
from autoccl.adaptive.launch import HOST_ID_PREFIX, host_env, run_local
from autoccl.adaptive.nvml import read_gpus
from autoccl.cli import main

NAMES = ["NCCL_HOSTID", "NCCL_NET", "NCCL_SOCKET_IFNAME", "NCCL_IB_DISABLE", "AUTOCCL_TOPO_HOST", "MINE"]


def test_every_rank_is_a_host_of_its_own() -> None:
    # a value of the command's (env: set in every rank) gives way to the host's
    got = run_local(W.env_job, 3, NAMES, env={"MINE": "x", "NCCL_SOCKET_IFNAME": "eth0"}, hosts=True)
    for r, env in enumerate(got):
        host = f"{HOST_ID_PREFIX}{r}"
        assert env == {
            "NCCL_HOSTID": host,
            "NCCL_NET": "Socket",
            "NCCL_SOCKET_IFNAME": "lo",
            "NCCL_IB_DISABLE": "1",
            "AUTOCCL_TOPO_HOST": host,
            "MINE": "x",
        }
        assert host_env(r) == {k: v for k, v in env.items() if k != "MINE"}
    # without hosts: nothing of it, and this process's environment is left as it was
    for env in run_local(W.env_job, 2, NAMES, env={"MINE": "y"}):
        assert env["NCCL_HOSTID"] is None and env["AUTOCCL_TOPO_HOST"] is None and env["MINE"] == "y"
    assert "NCCL_HOSTID" not in os.environ and "MINE" not in os.environ
    assert HOST_ID_PREFIX == "autoccl-host-"  # as benchmarks/gpu/hosts_env.sh names them
    text = (Path(__file__).resolve().parents[2] / "benchmarks/gpu/hosts_env.sh").read_text()
    assert f"HOST_ID_PREFIX={HOST_ID_PREFIX}\n" in text
    for k in ("NCCL_NET=Socket", "NCCL_SOCKET_IFNAME=lo", "NCCL_IB_DISABLE=1"):
        assert k in text


@pytest.fixture
def one_gpu(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, dict[str, Any]]]:
    """A machine of one GPU of 1 GiB, as torch is told; the jobs the commands would start, recorded."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: SimpleNamespace(total_memory=1 << 30))
    started: list[tuple[str, int, dict[str, Any]]] = []
    doc = {"name": "fake", "npus": ["a", "b"], "links": []}
    results = {
        "check_job": {"cases": 0, "failures": []},
        "bench_job": {"rows": []},
        "topo_job": {"topology": doc, "reports": []},
    }

    def fake_run_local(job: Any, n: int, cfg: dict[str, Any], **kwargs: Any) -> list[Any]:
        started.append((job.__name__, n, kwargs))
        return [results[job.__name__]]

    monkeypatch.setattr(launch, "run_local", fake_run_local)
    return started


def test_the_ranks_share_gpu_0(S, one_gpu: list[tuple[str, int, dict[str, Any]]]) -> None:
    """Two ranks by default, or --nproc's, or the topology's, none of them limited by the GPUs there are;
    started as hosts over NCCL."""
    for args, job, n in [
        (["adaptive", "check"], "check_job", 2),
        (["adaptive", "check", "--all-ops", "--nproc", "3"], "check_job", 3),
        (["adaptive", "check", "-g", "torus:2x2"], "check_job", 4),
        (["adaptive", "bench", "--sizes", "64M,256M"], "bench_job", 2),
        (["topo"], "topo_job", 2),
    ]:
        one_gpu.clear()
        r = CliRunner().invoke(main, [*args, "--device", "cuda", "--hosts-on-one-gpu"])
        assert r.exit_code == 0, (args, r.output)
        assert [(name, ranks) for name, ranks, _ in one_gpu] == [(job, n)], args
        assert one_gpu[0][2]["hosts"] is True and one_gpu[0][2]["backend"] == "nccl", args
    # without the option: one rank per GPU, as before
    one_gpu.clear()
    r = CliRunner().invoke(main, ["adaptive", "check", "--device", "cuda"])
    assert r.exit_code == 1 and "only 1 GPU is visible" in r.output and not one_gpu


def test_refused_before_any_process_starts(
    S, one_gpu: list[tuple[str, int, dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the ranks share GPU 0's memory: 2 x 2 x 300 MiB is more than 1 GiB
    r = CliRunner().invoke(
        main, ["adaptive", "bench", "--device", "cuda", "--hosts-on-one-gpu", "--sizes", "300M"]
    )
    assert r.exit_code == 2 and "a rank's share of GPU 0's memory (2 rank(s))" in r.output, r.output
    r = CliRunner().invoke(main, ["adaptive", "bench", "--device", "cuda", "--sizes", "300M", "--nproc", "2"])
    assert r.exit_code == 1 and "only 1 GPU(s) visible" in r.output, r.output
    # a launcher's ranks are its own to place
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "0")
    r = CliRunner().invoke(main, ["adaptive", "check", "--device", "cuda", "--hosts-on-one-gpu"])
    assert r.exit_code == 1 and "--hosts-on-one-gpu starts its own ranks" in r.output, r.output
    assert not one_gpu


@pytest.mark.parametrize("nvml", [hgx_slice(1), pcie_only(1)], ids=["nvlink-to-switch", "pcie"])
def test_two_hosts_on_one_gpu_detected(S, nvml: Any) -> None:
    """Each rank reports its own host and the same GPU: two hosts, one GPU each, through their NICs."""
    gpus = read_gpus(nvml)
    reports = [
        RankReport(r, f"{HOST_ID_PREFIX}{r}", 0, "cuda", gpu_uuid=gpus[0].uuid, gpus=gpus) for r in range(2)
    ]
    doc = build_topology(reports)
    assert doc["npus"] == ["autoccl-host-0/gpu0", "autoccl-host-1/gpu0"]
    assert doc["nics"] == ["autoccl-host-0/nic", "autoccl-host-1/nic"] and "network" in doc["switches"]
    t = S.topology_from_dict(doc)
    for coll in S.COLLECTIVES:
        sched, _ = S.synthesize(t, coll, "1M", chunks=2)
        assert S.check(sched, t)["ok"], coll


def test_check_on_cpu_ranks_as_hosts(S, tmp_path: Path) -> None:
    """End to end on gloo: the ranks detect two hosts, and the check on them passes."""
    out = tmp_path / "topo.yaml"
    r = CliRunner().invoke(main, ["topo", "--device", "cpu", "--hosts-on-one-gpu", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert yaml.safe_load(out.read_text())["npus"] == ["autoccl-host-0/cpu0", "autoccl-host-1/cpu0"]
    args = ["adaptive", "check", "--device", "cpu", "--hosts-on-one-gpu", "--dtypes", "float32,int8"]
    r = CliRunner().invoke(main, [*args, "--all-ops"])
    assert r.exit_code == 0, r.output
    assert "0 failure(s)" in r.output
