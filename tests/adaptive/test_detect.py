"""Topology detection from NVML (through a fake pynvml layer), sysfs NIC rates and rank reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from fake_nvml import GPU, FakeGpu, FakeNvml, cube_mesh, hgx_slice, pcie_only

from autoccl.adaptive.detect import RankReport, build_topology, nic_rates
from autoccl.adaptive.nvml import NvmlUnavailable, normalize_bus_id, read_gpus
from autoccl.cli import main


def _reports(nv: FakeNvml, host: str = "h0", first_rank: int = 0, nic_gbps: float = 0.0) -> list[RankReport]:
    gpus = read_gpus(nv)
    return [
        RankReport(first_rank + i, host, i, "cuda", gpu_uuid=g.uuid, gpus=gpus, nic_gbps=nic_gbps)
        for i, g in enumerate(gpus)
    ]


def _links(doc: dict) -> dict[tuple[str, str], float]:
    return {(x["src"], x["dst"]): x["bandwidth_gbps"] for x in doc["links"]}


def test_bus_ids_are_normalized() -> None:
    assert normalize_bus_id(b"00000000:18:00.0") == "0000:18:00.0"
    assert normalize_bus_id("0000:AB:00.0") == "0000:ab:00.0"


def test_read_gpus_sees_active_links_and_pcie() -> None:
    nv = cube_mesh()
    gpus = read_gpus(nv)
    assert [len(g.nvlinks) for g in gpus] == [3, 3, 3, 3]  # inactive links are skipped
    assert gpus[0].name == "Tesla V100-SXM2-16GB" and gpus[0].pcie_gen == 3 and gpus[0].pcie_width == 16
    assert {link.remote_type for g in gpus for link in g.nvlinks} == {"gpu"}
    assert nv.initialized == 0  # shut down again


def test_hgx_slice_gives_an_nvswitch_at_eighteen_links(S) -> None:
    doc = build_topology(_reports(hgx_slice(2)))
    assert doc["npus"] == ["h0/gpu0", "h0/gpu1"]
    assert doc["switches"] == ["h0/nvswitch"]
    links = _links(doc)
    assert links[("h0/gpu0", "h0/nvswitch")] == pytest.approx(18 * 25.0)
    assert links[("h0/nvswitch", "h0/gpu1")] == pytest.approx(18 * 25.0)
    assert not any("pcie" in s for s in doc["switches"])
    t = S.topology_from_dict(doc)
    sched, _ = S.synthesize(t, "allgather", "64M")
    assert S.check(sched, t)["ok"]
    assert "NV18" in doc["description"]


def test_partial_nvlink_mesh_falls_back_to_pcie_for_unlinked_pairs(S) -> None:
    doc = build_topology(_reports(cube_mesh()))
    links = _links(doc)
    assert links[("h0/gpu0", "h0/gpu1")] == pytest.approx(50.0)  # two NVLink 2 links
    assert links[("h0/gpu0", "h0/gpu2")] == pytest.approx(25.0)
    assert ("h0/gpu0", "h0/gpu3") not in links
    assert "h0/pcie" in doc["switches"]
    assert links[("h0/gpu0", "h0/pcie")] == pytest.approx(0.985 * 16)
    S.topology_from_dict(doc)


def test_pcie_only_and_missing_remote_type(S) -> None:
    doc = build_topology(_reports(pcie_only(3)))
    assert doc["switches"] == ["h0/pcie"]
    assert _links(doc)[("h0/gpu2", "h0/pcie")] == pytest.approx(1.969 * 16)
    # NVML without remote device types: a remote bus id that is a GPU still makes a GPU link
    nv = FakeNvml(
        [
            FakeGpu("00000000:01:00.0", [("00000000:02:00.0", GPU)] * 4),
            FakeGpu("00000000:02:00.0", [("00000000:01:00.0", GPU)] * 4),
        ],
        no_remote_type=True,
    )
    doc2 = build_topology(_reports(nv))
    assert _links(doc2)[("h0/gpu0", "h0/gpu1")] == pytest.approx(100.0)
    assert "switches" not in doc2


def test_two_hosts_get_nics_on_a_network_switch(S) -> None:
    reports = _reports(hgx_slice(2), "a", 0, nic_gbps=50.0) + _reports(hgx_slice(2), "b", 2, nic_gbps=50.0)
    doc = build_topology(reports)
    assert doc["npus"] == ["a/gpu0", "a/gpu1", "b/gpu0", "b/gpu1"]
    assert doc["nics"] == ["a/nic", "b/nic"] and "network" in doc["switches"]
    assert doc["dims"] == [2, 2]
    links = _links(doc)
    assert links[("a/nic", "network")] == pytest.approx(50.0)
    assert links[("a/gpu0", "a/nic")] == pytest.approx(3.938 * 16)
    t = S.topology_from_dict(doc)
    sched, _ = S.synthesize(t, "allreduce", "16M", chunks=2)
    assert S.check(sched, t)["ok"]


def test_cpu_ranks_and_unknown_nic_rate(S) -> None:
    reports = [RankReport(r, "a" if r < 2 else "b", r % 2, "cpu") for r in range(4)]
    doc = build_topology(reports)
    assert doc["switches"] == ["a/loopback", "b/loopback", "network"]
    assert "10 Gb/s assumed" in doc["description"]
    S.topology_from_dict(doc)


def test_rank_errors_are_sentences() -> None:
    gpus = read_gpus(hgx_slice(2))
    with pytest.raises(ValueError, match="one rank per device"):
        build_topology([RankReport(r, "h", r, "cuda", gpu_uuid=gpus[0].uuid, gpus=gpus) for r in range(2)])
    with pytest.raises(NvmlUnavailable, match="NVML could not start"):
        read_gpus(FakeNvml([], fail_init=True))


def test_nic_rates_from_sysfs(tmp_path: Path) -> None:
    net = tmp_path / "class" / "net"
    for name, speed, dev in (("eth0", "25000", True), ("lo", "", False), ("eth1", "-1", True)):
        (net / name).mkdir(parents=True)
        (net / name / "speed").write_text(speed)
        if dev:
            (net / name / "device").mkdir()
    assert nic_rates(str(tmp_path)) == (["eth0"], pytest.approx(25000 / 8000))
    port = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    port.mkdir(parents=True)
    (port / "state").write_text("4: ACTIVE")
    (port / "rate").write_text("400 Gb/sec (4X NDR)")
    assert nic_rates(str(tmp_path)) == (["mlx5_0:1"], pytest.approx(50.0))


def test_topo_cli_from_reports(tmp_path: Path, S) -> None:
    raw = [r.to_dict() for r in _reports(cube_mesh())]
    src = tmp_path / "reports.json"
    src.write_text(json.dumps(raw))
    out, png = tmp_path / "t.yaml", tmp_path / "t.png"
    r = CliRunner().invoke(main, ["topo", "--from-reports", str(src), "-o", str(out), "--plot", str(png)])
    assert r.exit_code == 0, r.output
    assert "4 ranks" in r.output and png.stat().st_size > 1000
    assert S.load_topology(out).num_npus == 4
    bad = tmp_path / "bad.json"
    bad.write_text('[{"rank": 0}]')
    r = CliRunner().invoke(main, ["topo", "--from-reports", str(bad)])
    assert r.exit_code == 1 and "not a reports file" in r.output and "Traceback" not in r.output


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--nproc", "5"], "--nproc"),
        (["--device", "cpu"], "--device"),
        (["--hosts-on-one-gpu"], "--hosts-on-one-gpu"),
        (["--device", "cuda", "--nproc", "3"], "--device, --nproc"),
    ],
)
def test_topo_from_reports_refuses_the_options_that_start_ranks(
    tmp_path: Path, extra: list[str], named: str
) -> None:
    """--from-reports starts no process: --nproc, --device and --hosts-on-one-gpu were accepted and did
    nothing (a topology of the reports' 4 ranks came out of `--nproc 5`)."""
    src = tmp_path / "reports.json"
    src.write_text(json.dumps([r.to_dict() for r in _reports(cube_mesh())]))
    out = tmp_path / "t.yaml"
    r = CliRunner().invoke(main, ["topo", "--from-reports", str(src), "-o", str(out), *extra])
    assert r.exit_code == 2, r.output
    assert f"--from-reports starts no process: {named} would change nothing" in r.output, r.output
    assert "Traceback" not in r.output and not out.exists()


def test_topo_from_reports_needs_no_torch(tmp_path: Path) -> None:
    """Building a topology from reports starts no process: it ran the torch check (and imported the jobs
    module, which imports torch) first, so a machine without PyTorch could not read the reports its ranks
    wrote."""
    src = tmp_path / "reports.json"
    src.write_text(json.dumps([r.to_dict() for r in _reports(cube_mesh())]))
    out = tmp_path / "t.yaml"
    code = (
        "import sys; sys.modules['torch'] = None  # any import of torch fails, as where it is not installed\n"
        "from autoccl.cli import main\n"
        f"main(['topo', '--from-reports', {str(src)!r}, '-o', {str(out)!r}])"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "4 ranks" in p.stdout and out.is_file()
