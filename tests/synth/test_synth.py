"""Correctness, determinism, validation and closed forms of autoccl.synth (no timings)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

COLLS = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]


def _topos(S: Any) -> dict[str, Any]:
    gib = 2**30 / 1e9
    return {
        "mesh3x3": S.generate("mesh", [3, 3], bandwidth=50 * gib, latency=0.5),
        "torus3x3x2": S.generate("torus", [3, 3, 2]),
        "hetero_mesh": S.generate("mesh", [4, 3], dim_bandwidth=[50, 75]),
        "uni_ring": S.generate("uni_ring", [5]),  # asymmetric
        "switch": S.generate("switch", [5]),
        "unwound": S.generate("switch_unwound", [6], degree=2),
        "hypercube": S.generate("hypercube", [3]),
        "dragonfly": S.generate("dragonfly", [3, 2], global_bandwidth=25),
        "multidim": S.generate(
            "multidim", [2, 3, 2], dim_types=["ring", "fc", "switch"], dim_bandwidth=[100, 50, 25]
        ),
        "cluster": S.generate("cluster", [4, 2], nic_bandwidth=25),
    }


@pytest.mark.parametrize("coll", COLLS)
def test_checker_proves_every_collective(S: Any, coll: str) -> None:
    for name, t in _topos(S).items():
        s, _st = S.synthesize(t, coll, "4M", chunks=2, seeds=2, threads=2)
        r = S.check(s, t)
        assert r["ok"], (name, r["errors"])
        assert r["redundant"] == 0, name
        sim = S.simulate(t, s)
        assert math.isclose(sim["time_us"], s.time_us, rel_tol=1e-9), (name, sim["time_us"], s.time_us)
        assert s.time_us >= S.lower_bound(t, coll, "4M") * (1 - 1e-9), name


def test_failures_and_asymmetric_links(S: Any, tmp_path: Path) -> None:
    doc = {
        "npus": ["a", "b", "c", "d"],
        "switches": ["sw"],
        "links": [
            {"src": "a", "dst": "b", "latency_us": 1, "bandwidth_gbps": 100},
            {"src": "b", "dst": "c", "latency_us": 1, "bandwidth_gbps": 10},
            {"src": "c", "dst": "a", "latency_us": 2, "bandwidth_gbps": 40},
            {"src": "a", "dst": "sw", "latency_us": 0.5, "bandwidth_gbps": 25, "bidirectional": True},
            {"src": "d", "dst": "sw", "latency_us": 0.5, "bandwidth_gbps": 25, "bidirectional": True},
            {"src": "c", "dst": "d", "latency_us": 1, "bandwidth_gbps": 30, "bidirectional": True},
        ],
        "failed": {"links": [["c", "d"]]},
    }
    p = tmp_path / "t.yaml"
    import yaml

    p.write_text(yaml.safe_dump(doc))
    t = S.load_topology(p)
    assert t.num_npus == 4
    for coll in COLLS:
        s, _ = S.synthesize(t, coll, "1M", chunks=3, seeds=3, root=2)
        r = S.check(s, t)
        assert r["ok"], (coll, r["errors"])
    doc["failed"] = {"nodes": ["d"]}
    p.write_text(yaml.safe_dump(doc))
    t2 = S.load_topology(p)
    assert t2.num_npus == 3
    s, _ = S.synthesize(t2, "allreduce", "1M")
    assert S.check(s, t2)["ok"]


def test_generated_topology_with_failures(S: Any) -> None:
    t = S.topology_from_dict(
        {
            "generator": {"kind": "torus", "dims": [4, 4]},
            "failed": {"nodes": ["npu5"], "links": [["npu0", "npu1"]]},
        }
    )
    assert t.num_npus == 15
    s, _ = S.synthesize(t, "allreduce", "1M", seeds=2)
    assert S.check(s, t)["ok"]


@pytest.mark.parametrize(
    ("doc", "msg"),
    [
        (
            {"npus": ["a", "b"], "links": [{"src": "a", "dst": "zz", "latency_us": 1, "bandwidth_gbps": 1}]},
            "unknown node 'zz'",
        ),
        (
            {"npus": ["a", "b"], "links": [{"src": "a", "dst": "b", "latency_us": 1, "bandwidth_gbps": -5}]},
            "bandwidth must be positive",
        ),
        (
            {"npus": ["a", "b"], "links": [{"src": "a", "dst": "b", "latency_us": -1, "bandwidth_gbps": 5}]},
            "latency",
        ),
        (
            {
                "npus": ["a", "b", "c"],
                "links": [
                    {"src": "a", "dst": "b", "latency_us": 1, "bandwidth_gbps": 5, "bidirectional": True}
                ],
            },
            "disconnected NPUs",
        ),
        ({"npus": ["a", "a"]}, "duplicate node"),
        ({"npus": ["a", "b"], "links": [{"src": "a", "dst": "b", "bandwidth_gbps": 5}]}, "needs latency_us"),
        (
            {"npus": ["a", "b"], "links": [{"src": "a", "dst": "b", "latency_us": "x", "bandwidth_gbps": 5}]},
            "must be a number",
        ),
        ({"npus": ["a"], "colour": 1}, "unknown key"),
        ({"npus": ["a"], "units": "GB/s"}, r"unknown key\(s\) \['units'\]"),  # it was taken and ignored
        (
            {
                "npus": ["a", "b"],
                "links": [
                    {"src": "a", "dst": "b", "latency_us": 1, "bandwidth_gbps": 5, "bidirectional": "false"}
                ],
            },
            r"links\[0\]\.bidirectional: must be true or false, got 'false'",
        ),
        (
            {
                "npus": ["a", "b"],
                "links": [{"src": "a", "dst": "b", "latency_us": 1, "bandwidth_gbps": 5, "bidirectional": 1}],
            },
            "bidirectional: must be true or false, got 1",
        ),
        ({"switches": ["s"]}, "no NPUs"),
        ({"generator": {"kind": "blob", "dims": [2]}}, "unknown generator"),
        (
            {
                "npus": ["a", "b"],
                "links": [["a", "b", 1, 1], ["b", "a", 1, 1]],
                "failed": {"links": [["a", "c"]]},
            },
            "unknown node 'c'",
        ),
        # read by no one beside a generator: the file said what the topology did not do
        (
            {"generator": {"kind": "ring", "dims": [4]}, "defaults": {"bandwidth_gbps": 1}},
            r"'generator' cannot be combined with defaults",
        ),
        (
            {"generator": {"kind": "ring", "dims": [4]}, "dims": [2, 2]},
            "'generator' cannot be combined with dims",
        ),
    ],
)
def test_file_validation(S: Any, doc: dict[str, Any], msg: str) -> None:
    with pytest.raises(S.TopologyFileError, match=msg):
        S.topology_from_dict(doc)


def test_a_generator_files_name_is_kept(S: Any, tmp_path: Path) -> None:
    """`name:` beside `generator:` was dropped (the topology kept the generator's ring_4) unless the file also
    had `failed:`."""
    (tmp_path / "g.yaml").write_text("name: mine\ngenerator: {kind: ring, dims: [4]}\n")
    assert S.load_topology(tmp_path / "g.yaml").name == "mine"
    (tmp_path / "f.yaml").write_text(
        "name: mine\ngenerator: {kind: ring, dims: [4]}\nfailed: {nodes: [npu3]}\n"
    )
    assert S.load_topology(tmp_path / "f.yaml").name == "mine"
    (tmp_path / "plain.yaml").write_text("generator: {kind: ring, dims: [4]}\n")
    assert S.load_topology(tmp_path / "plain.yaml").name == "ring_4"


def test_exponent_form_numbers_of_a_yaml_file(S: Any, tmp_path: Path) -> None:
    """PyYAML reads 1e3 as the string '1e3' (YAML 1.1 floats need a dot and a signed exponent): it was refused
    as not a number; it is the number YAML 1.2 and JSON read."""
    (tmp_path / "t.yaml").write_text(
        "npus: [a, b]\ndefaults: {latency_us: 5e-1}\n"
        "links:\n  - {src: a, dst: b, bandwidth_gbps: 1e3, bidirectional: true}\n"
    )
    assert sorted(S.load_topology(tmp_path / "t.yaml").links) == [
        ("a", "b", 0.5, 1000.0),
        ("b", "a", 0.5, 1000.0),
    ]
    (tmp_path / "g.yaml").write_text("generator: {kind: ring, dims: [4], bandwidth_gbps: 1.5E2}\n")
    assert {bw for *_, bw in S.load_topology(tmp_path / "g.yaml").links} == {150.0}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("1e999", "bandwidth_gbps: must be a finite number, got '1e999'"),
        ("nan", "bandwidth_gbps: must be a number, got 'nan'"),  # float() takes it
        ("Infinity", "bandwidth_gbps: must be a number, got 'Infinity'"),
    ],
)
def test_what_is_not_a_number_is_still_refused(S: Any, value: str, message: str) -> None:
    """Only the exponent form is read from text: not all that float() takes."""
    doc = {"npus": ["a", "b"], "links": [["a", "b"], ["b", "a"]], "defaults": {"latency_us": 1}}
    doc["defaults"]["bandwidth_gbps"] = value
    with pytest.raises(S.TopologyFileError, match=message):
        S.topology_from_dict(doc)


@pytest.mark.parametrize("dims", [[0], [], "4", [2, True]])
def test_a_generators_dims_error_names_the_file_once(S: Any, dims: Any) -> None:
    with pytest.raises(S.TopologyFileError) as e:
        S.topology_from_dict({"generator": {"kind": "ring", "dims": dims}}, source="gen1.yaml")
    assert str(e.value) == "gen1.yaml: generator.dims: must be a non-empty list of positive integers"


@pytest.mark.parametrize(("key", "kind"), [("rails", "cluster"), ("degree", "switch_unwound")])
def test_a_generators_count_must_be_whole(S: Any, key: str, kind: str) -> None:
    doc = {"generator": {"kind": kind, "dims": [4, 2] if kind == "cluster" else [6], key: 2.5}}
    with pytest.raises(
        S.TopologyFileError, match=rf"^g.yaml: generator.{key}: must be a whole number, got 2.5$"
    ):
        S.topology_from_dict(doc, source="g.yaml")


@pytest.mark.parametrize("kind", ["ring", "uni_ring", "fully_connected", "fc", "switch", "switch_unwound"])
def test_a_one_dimensional_generator_refuses_several_dimensions(S: Any, kind: str) -> None:
    """ring:4x4 was a ring of 16 NPUs named ring_4x4, read as a 4 x 4 arrangement that was never built."""
    with pytest.raises(ValueError, match=rf"^{kind} takes one dimension, \[n\], not 2 \(several: torus"):
        S.generate(kind, [4, 4])
    with pytest.raises(S.TopologyFileError, match=rf"^g.yaml: generator: {kind} takes one dimension"):
        S.topology_from_dict({"generator": {"kind": kind, "dims": [2, 3]}}, source="g.yaml")
    assert S.generate(kind, [4]).num_npus == 4


@pytest.mark.parametrize(("kind", "links"), [("ring", [(0, 1), (1, 0)]), ("uni_ring", [(0, 1), (1, 0)])])
def test_a_ring_of_two_is_one_link_each_way(S: Any, kind: str, links: list[tuple[int, int]]) -> None:
    """ring:2 added npu1 -> npu0 twice and was refused as a duplicate link (`autoccl synth -g ring:2`,
    `autoccl adaptive check -g ring:2`), while torus:2 and mesh:2 built."""
    t = S.generate(kind, [2])
    assert sorted((int(s[3:]), int(d[3:])) for s, d, _, _ in t.links) == links
    sched, _ = S.synthesize(t, "allreduce", "1M")
    assert S.check(sched, t)["ok"]


def test_determinism(S: Any) -> None:
    t = S.generate("mesh", [4, 4], dim_bandwidth=[50, 80])
    a, sa = S.synthesize(t, "allgather", "16M", chunks=2, seeds=5, threads=2, seed=7)
    b, sb = S.synthesize(t, "allgather", "16M", chunks=2, seeds=5, threads=1, seed=7)
    assert a.to_json() == b.to_json()
    assert sa["seed_times_us"] == sb["seed_times_us"]
    c, _ = S.synthesize(t, "allgather", "16M", chunks=2, seeds=1, seed=sa["best_seed"])
    assert c.time_us == a.time_us


def test_closed_forms(S: Any) -> None:
    n, bw, lat, size = 8, 40.0, 1.0, 64 * 2**20
    ring = S.generate("uni_ring", [n], bandwidth=bw, latency=lat)
    chunk = size / n
    step = lat + chunk / (bw * 1e3)
    for coll, steps in (("allgather", n - 1), ("reducescatter", n - 1), ("allreduce", 2 * (n - 1))):
        r = S.simulate(ring, S.baseline(ring, "ring", coll, size))
        assert math.isclose(r["time_us"], steps * step, rel_tol=1e-9), coll
        assert S.check(r["timed"], ring)["ok"]
    # The synthesizer finds the same optimum on a unidirectional ring.
    s, _ = S.synthesize(ring, "allgather", size)
    assert math.isclose(s.time_us, (n - 1) * step, rel_tol=1e-9)
    # Direct all-gather on a fully connected graph: all n-1 links of an NPU in parallel -> one step.
    fc = S.generate("fully_connected", [n], bandwidth=bw, latency=lat)
    r = S.simulate(fc, S.baseline(fc, "direct", "allgather", size))
    assert math.isclose(r["time_us"], step, rel_tol=1e-9)
    # Shared-port switch: every NPU's uplink serializes its n-1 sends.
    sw = S.generate("switch", [n], bandwidth=bw, latency=lat)
    r = S.simulate(sw, S.baseline(sw, "direct", "allgather", size))
    assert math.isclose(r["time_us"], (n - 1) * step, rel_tol=1e-9)


def test_baselines_correct(S: Any) -> None:
    topos = {
        "torus": S.generate("torus", [4, 2]),
        "cluster": S.generate("cluster", [2, 4]),
        "mesh": S.generate("mesh", [3, 2]),
    }
    for name, t in topos.items():
        for algo in S.BASELINES:
            for coll in COLLS:
                try:
                    b = S.baseline(t, algo, coll, "2M", chunks=2, root=1)
                except ValueError:
                    continue
                r = S.simulate(t, b)
                c = S.check(r["timed"], t)
                assert c["ok"], (name, algo, coll, c["errors"])


def test_checker_rejects_wrong_schedules(S: Any, tmp_path: Path) -> None:
    t = S.generate("mesh", [2, 3])
    s, _ = S.synthesize(t, "allreduce", "1M")
    path = tmp_path / "s.json"
    S.save_schedule(s, path, t)
    data = json.loads(path.read_text())
    assert S.check(S.load_schedule(path), t)["ok"]
    bad = dict(data, transfers=data["transfers"][:-1])  # a rank misses a chunk
    path.write_text(json.dumps(bad))
    r = S.check(S.load_schedule(path), t)
    assert not r["ok"] and "ends with chunk" in r["errors"][0]
    dup = dict(data, transfers=[*data["transfers"][:1], *data["transfers"]])  # a contribution reduced twice
    path.write_text(json.dumps(dup))
    r = S.check(S.load_schedule(path), t)
    assert not r["ok"]
    early = [list(x) for x in data["transfers"]]
    last = early[-1]
    last[3], last[4] = 0.0, last[4] - last[3]  # sends data it does not hold yet
    path.write_text(json.dumps(dict(data, transfers=early)))
    assert not S.check(S.load_schedule(path), t)["ok"]


def test_exporters(S: Any) -> None:
    t = S.generate("fully_connected", [4])
    s, _ = S.synthesize(t, "allreduce", "1M")
    xml = S.to_msccl_xml(s, "ar4")
    import xml.etree.ElementTree as ET

    root = ET.fromstring(xml)
    for attr in (
        "name",
        "proto",
        "nchannels",
        "nchunksperloop",
        "ngpus",
        "coll",
        "inplace",
        "outofplace",
        "minBytes",
        "maxBytes",
    ):
        assert attr in root.attrib
    for gpu in root:
        ids = [int(tb.attrib["id"]) for tb in gpu]
        assert ids == list(range(len(ids)))
        for tb in gpu:
            assert len(tb) <= 64
    plan = json.loads(S.to_mscclpp_json(s, t))
    assert len(plan["gpus"]) == 4
    assert all(len(tb["ops"]) <= 64 for g in plan["gpus"] for tb in g["threadblocks"])
    # larger schedule: MSCCL splits connections over channels so no threadblock exceeds 64 steps
    big, _ = S.synthesize(S.generate("mesh", [4, 4]), "allgather", "16M", chunks=8)
    root = ET.fromstring(S.to_msccl_xml(big))
    assert max(len(tb) for gpu in root for tb in gpu) <= 64
    with pytest.raises(ValueError, match="single-host"):
        S.to_mscclpp_json(
            *S.synthesize(S.generate("cluster", [2, 2]), "allgather", "1M")[:1], S.generate("cluster", [2, 2])
        )


def test_cli(S: Any, tmp_path: Path) -> None:
    from autoccl.cli import main

    runner = CliRunner()
    out = tmp_path / "s.json"
    rep = tmp_path / "r.json"
    res = runner.invoke(
        main,
        [
            "synth",
            "-g",
            "mesh:3x3",
            "-c",
            "allreduce",
            "-s",
            "8M",
            "--chunks",
            "2",
            "--seeds",
            "2",
            "-o",
            str(out),
            "--report",
            str(rep),
            "--msccl-xml",
            str(tmp_path / "a.xml"),
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads(rep.read_text())
    assert report["check"]["ok"] and report["simulated_time_us"] == pytest.approx(report["time_us"])
    res = runner.invoke(main, ["sim", "-g", "mesh:3x3", "--schedule", str(out)])
    assert res.exit_code == 0 and "check ok" in res.output, res.output
    res = runner.invoke(main, ["sim", "-g", "mesh:3x3", "-c", "allreduce", "-b", "all", "-s", "8M"])
    assert res.exit_code == 0 and "ring" in res.output, res.output
    # a bad generator value is a usage error, as a bad --size (status 2; it was 1)
    res = runner.invoke(main, ["synth", "-g", "mesh:3x3", "--bw", "-1"])
    assert res.exit_code == 2 and "bandwidth must be positive" in res.output
    res = runner.invoke(main, ["synth", "-g", "ring:0"])  # it read "generator 'ring:0'.dims: must be ..."
    assert res.exit_code == 2 and "'ring:0': every dimension must be at least 1" in res.output, res.output
    assert runner.invoke(main, ["synth", "-g", "ring:4", "-s", "lots"]).exit_code == 2


def test_plots(S: Any, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from autoccl.synth import plots

    t = S.generate("mesh", [4, 4])
    s, _ = S.synthesize(t, "allgather", "4M")
    sim = S.simulate(t, s)
    plots.heatmap(t, sim["link_util"], tmp_path / "h.png")
    plots.timeline(t, sim["timed"], tmp_path / "t.png")
    assert (tmp_path / "h.png").stat().st_size > 1000 and (tmp_path / "t.png").stat().st_size > 1000


def test_stream_round_trip(S: Any, tmp_path: Path) -> None:
    """A streamed schedule reads back as the in-memory one (same transfers and times; reductions ordered by
    arrival, ties possibly the other way) and passes the checker, for every collective."""
    import numpy as np

    def rows(s: Any) -> Any:
        c = s.transfer_columns()
        a = np.stack([c["chunk"], c["src"], c["dst"], np.round(c["start_us"] * 1e6), c["op"]], 1)
        return a[np.lexsort(a.T[::-1])]

    for name, t in {
        "cluster": S.generate("cluster", [4, 2], nic_bandwidth=25),
        "uni": S.generate("uni_ring", [5]),
        "switch": S.generate("switch", [16]),  # the direct pattern, kept at 2 chunks per NPU
    }.items():
        for coll in COLLS:
            mem, _ = S.synthesize(t, coll, "4M", chunks=2, seeds=3)
            path = tmp_path / f"{name}.{coll}.acss"
            _, st = S.synthesize_to_stream(t, coll, "4M", path, chunks=2, seeds=3)
            assert st["bytes_written"] == path.stat().st_size
            back = S.load_schedule(path, t)
            assert back.num_transfers == mem.num_transfers == st["transfers"], (name, coll)
            assert np.array_equal(rows(back), rows(mem)), (name, coll)
            assert S.check(back, t)["ok"], (name, coll)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nan", "bad size 'nan': not a finite number of bytes"),
        (" NaN ", "not a finite number of bytes"),
        ("nanK", "bad size 'nanK': not a finite number of bytes"),
        ("inf", "bad size 'inf': not a finite number of bytes"),
        ("Infinity", "not a finite number of bytes"),
        ("1e400M", "bad size '1e400M': not a finite number of bytes"),  # float() takes it: inf
        ("1e300T", "not a finite number of bytes"),  # finite, times the unit: inf
        ("-inf", "bad size '-inf': not a finite number of bytes"),
        ("-1K", "size must be positive, got '-1K'"),
        (float("nan"), "size must be a finite number of bytes, got nan"),
        (float("inf"), "size must be a finite number of bytes, got inf"),
    ],
)
def test_parse_size_refuses_what_is_not_a_finite_size(text: str | float, message: str) -> None:
    """parse_size itself refuses NaN and infinities (float() takes 'nan', 'inf' and '1e400'), where it had
    returned them and each caller checked again."""
    from autoccl.synth import parse_size

    with pytest.raises(ValueError) as e:
        parse_size(text)
    assert message in str(e.value)


def test_parse_size_of_valid_sizes() -> None:
    from autoccl.synth import parse_size

    assert parse_size("1G") == 2**30 and parse_size("64MiB") == 64 * 2**20 and parse_size("4096") == 4096
    assert parse_size(" 1.5m ") == 1.5 * 2**20 and parse_size("1024T") == 2**50 and parse_size("0.5") == 0.5
    assert parse_size(4096) == 4096.0 and parse_size(0) == 0.0  # a number: the library checks its range


def test_the_limits_python_checks_are_the_librarys(S: Any) -> None:
    """The command line checks sizes and chunk counts before it loads the extension, against autoccl.synth's
    MAX_BYTES and MAX_CHUNKS: they must be the extension's, which must be the limits it enforces."""
    import math

    lib = S.ext()
    assert S.MAX_BYTES == lib.MAX_COLLECTIVE_BYTES == 2.0**50
    assert S.MAX_CHUNKS == lib.MAX_CHUNKS
    t = S.generate("ring", [4])
    assert S.baseline(t, "ring", "allgather", S.MAX_BYTES).bytes == S.MAX_BYTES
    with pytest.raises(ValueError, match="above the largest supported"):
        S.baseline(t, "ring", "allgather", math.nextafter(S.MAX_BYTES, math.inf))
    # 4 NPUs x k chunks: MAX_CHUNKS passes the chunk check (the transfers are then too many), one more NPU's
    # share does not, in the baselines and in synthesis
    k = S.MAX_CHUNKS // 4
    with pytest.raises(ValueError) as e:
        S.baseline(t, "ring", "allgather", "1G", chunks=k)
    assert "too many chunks" not in str(e.value) and "transfers" in str(e.value)
    with pytest.raises(ValueError, match=f"too many chunks: {4 * (k + 1)}, at most {S.MAX_CHUNKS}"):
        S.baseline(t, "ring", "allgather", "1G", chunks=k + 1)
    with pytest.raises(ValueError, match=f"too many chunks: {4 * (k + 1)}, at most {S.MAX_CHUNKS}"):
        S.synthesize(t, "allgather", "1G", chunks=k + 1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["synth", "-g", "mesh:1x1"], "at least 2 NPUs"),
        (["synth", "-g", "fc:10000000"], "more than the limit"),
        (["synth", "-g", "fc:6000"], "links"),
        (["synth", "-g", "dragonfly:12x3"], "routers per group"),
        (["synth", "-g", "mesh:4x4", "-o", "/nonexistent/dir/s.json"], "does not exist"),
        (["synth", "-g", "mesh:4x4", "--stream", "x.acss", "-o", "y.json"], "cannot be combined"),
        (
            ["synth", "-g", "mesh:200x200", "-c", "allreduce", "--max-memory", "1"],
            "more than the 1.0 GiB allowed",
        ),
        # a limit far below a GiB in its own unit (it read "more than the 0.0 GiB allowed")
        (
            ["synth", "-g", "mesh:8x8", "-c", "allreduce", "--max-memory", "1e-6"],
            "more than the 1.0 KiB allowed",
        ),
        (["sim", "-g", "mesh:4x4", "--schedule", __file__], "not valid JSON"),
    ],
)
def test_bad_inputs_are_one_sentence(S: Any, args: list[str], message: str) -> None:
    from autoccl.cli import main

    res = CliRunner().invoke(main, args)
    assert res.exit_code != 0, res.output
    assert message in res.output, res.output
    assert "Traceback" not in res.output


def test_bounds_and_quality_on_hierarchies(S: Any) -> None:
    """The printed bound is a cut over hosts or groups on rail clusters and a dragonfly; the default
    synthesis (chunks chosen, default seeds) stays within 1.15x of it; no schedule beats either bound."""
    cases = {
        "cluster": (S.generate("cluster", [8, 8], bandwidth=450, nic_bandwidth=50), "allgather"),
        "dragonfly": (S.generate("dragonfly", [8, 16], global_bandwidth=12.5), "allgather"),
        "rails": (
            S.generate("multidim", [8, 8], dim_types=["fc", "ring"], dim_bandwidth=[450 / 7, 25]),
            "allreduce",
        ),
    }
    for name, (t, coll) in cases.items():
        b = S.lower_bounds(t, coll, "1G")
        assert b["kind"] in ("cut", "partition"), (name, b)
        s, st = S.synthesize(t, coll, "1G", seeds=S.default_seeds(t), threads=2, record=False)
        bound = max(b["time_us"], b["model_us"])
        assert bound <= s.time_us <= 1.15 * bound, (name, s.time_us, b, st["chunk_trials"])


def test_synthesis_reports_progress_and_stops_on_its_error(S: Any, tmp_path: Any) -> None:
    """A long synthesis calls `progress` with its seconds and the chunk deliveries made so far, both growing;
    an exception the callback raises stops the synthesis (in memory and streamed, no file left) and is the one
    raised."""
    t = S.generate("mesh", [32, 32], bandwidth=50.0, latency=1.0)
    seen: list[tuple[float, int]] = []
    S.synthesize(
        t, "allreduce", "1G", chunks=4, seeds=1, record=False, progress=lambda s, d: seen.append((s, d))
    )
    assert len(seen) >= 2, seen
    assert all(a[0] <= b[0] and a[1] <= b[1] for a, b in itertools.pairwise(seen)), seen
    assert seen[-1][1] > 0, seen

    class Enough(Exception):
        pass

    def stop_after_first(seconds: float, deliveries: int) -> None:
        raise Enough(f"{seconds:.2f} s")

    with pytest.raises(Enough):
        S.synthesize(t, "allreduce", "1G", chunks=4, seeds=1, record=False, progress=stop_after_first)
    out = tmp_path / "s.acss"
    with pytest.raises(Enough):
        S.synthesize_to_stream(t, "allreduce", "1G", out, chunks=4, seeds=1, progress=stop_after_first)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_the_direct_pattern_on_a_switch_no_seed_solves(S: Any, tmp_path: Path) -> None:
    """On a 16-port switch no seed of the matching finds the direct pattern's collision-free rounds (1.035x
    its time at 64 MiB); the synthesis keeps the pattern, says so on its line and in the report, and the
    checker proves the schedule. direct=False runs the seeds alone."""
    from autoccl.cli import main

    t = S.generate("switch", [16])
    direct = S.simulate(t, S.baseline(t, "direct", "allgather", "64M"))["time_us"]
    sched, st = S.synthesize(t, "allgather", "64M", seeds=8, threads=2)
    assert st["direct_pattern"] and sched.time_us == pytest.approx(direct, rel=1e-9)
    assert S.check(sched, t)["ok"]
    _, alone = S.synthesize(t, "allgather", "64M", seeds=8, threads=2, direct=False)
    assert not alone["direct_pattern"] and alone["time_us"] > direct * 1.02
    report = tmp_path / "r.json"
    out = tmp_path / "s.json"
    args = ["synth", "-g", "switch:16", "-c", "allgather", "-s", "64M", "-o", str(out)]
    r = CliRunner().invoke(main, [*args, "--report", str(report)])
    assert r.exit_code == 0, r.output
    assert "spreading by the direct pattern (faster than every seed)" in r.output, r.output
    assert json.loads(report.read_text())["direct_pattern"] is True
    # streamed: the same count and pattern (the trials weigh it there too), written and read back
    for coll in ("allgather", "reducescatter", "allreduce"):
        mem, mst = S.synthesize(t, coll, "64M", seeds=8, threads=2)
        path = tmp_path / f"{coll}.acss"
        head, sst = S.synthesize_to_stream(t, coll, "64M", path, seeds=8, threads=2)
        assert sst["direct_pattern"] and sst["chunks_per_rank"] == mst["chunks_per_rank"] == 1, coll
        assert head.time_us == pytest.approx(mem.time_us, rel=1e-12), coll
        assert S.check(S.load_schedule(path, t), t)["ok"], coll
