"""`autoccl topo`, `autoccl profile` and `autoccl adaptive` on this machine's CPU ranks: a profiled topology
of the machine round-trips through the synthesizer and the executor. Bad input: one sentence, exit 1/2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoccl.cli import main


def _run(args: list[str]) -> object:
    return CliRunner().invoke(main, args, catch_exceptions=False)


def test_detect_profile_synthesize_execute(S, tmp_path: Path) -> None:
    topo, measured, report = tmp_path / "topo.yaml", tmp_path / "measured.yaml", tmp_path / "profile.json"
    r = _run(["topo", "--device", "cpu", "--nproc", "4", "-o", str(topo)])
    assert r.exit_code == 0, r.output
    t = S.load_topology(topo)
    assert t.num_npus == 4 and any(k == "switch" for _, k in t.nodes)
    r = _run(
        [
            "profile",
            "--device",
            "cpu",
            "-t",
            str(topo),
            "-o",
            str(measured),
            "--report",
            str(report),
            "--sizes",
            "4K,64K,256K",
            "--repeats",
            "2",
            "--plot",
            str(tmp_path / "m.png"),
        ]
    )
    assert r.exit_code == 0, r.output
    prof = json.loads(report.read_text())
    assert len(prof["profile"]["pairs"]) == 12 and len(prof["profile"]["contention"]) == 4
    for p in prof["profile"]["pairs"]:
        assert p["bandwidth_gbps"] > 0 and p["latency_us"] >= 0
    m = S.load_topology(measured)
    assert m.num_npus == 4
    for coll in S.COLLECTIVES:
        sched, _ = S.synthesize(m, coll, "1M", chunks=2)
        assert S.check(sched, m)["ok"]
    r = _run(
        [
            "adaptive",
            "check",
            "--device",
            "cpu",
            "-t",
            str(measured),
            "--dtypes",
            "float32,bfloat16,int64,bool,float8_e5m2",
        ]
    )
    assert r.exit_code == 0, r.output
    assert "0 failure(s)" in r.output


@pytest.mark.parametrize(
    "args,message",
    [
        (["profile", "--device", "cpu", "--sizes", "4K"], "at least two different sizes"),
        (["profile", "--device", "cpu", "--sizes", "4Q,1M"], "bad size"),
        (["profile", "--device", "cpu", "--repeats", "0"], "at least 1"),
        (["adaptive", "check", "--device", "cpu", "--colls", "alltoall"], "collectives are"),
        (["adaptive", "check", "--device", "cpu", "-g", "torus:2x2", "--sizes", "x"], "element counts"),
        (["adaptive", "check", "--device", "cpu", "-g", "nope:2"], "nope"),
        (["topo", "--device", "cpu", "--nproc", "0"], "at least 1"),
    ],
)
def test_bad_input_is_one_sentence(S, args: list[str], message: str) -> None:
    r = CliRunner().invoke(main, args)
    assert r.exit_code in (1, 2), r.output
    assert message in r.output and "Traceback" not in r.output


def test_bad_files_and_devices(S, tmp_path: Path) -> None:
    import torch

    bad = tmp_path / "bad.yaml"
    bad.write_text("npus: [a]\nlinks: [{src: a, dst: b}]\n")
    r = CliRunner().invoke(main, ["profile", "--device", "cpu", "-t", str(bad)])
    assert r.exit_code == 1 and "bad.yaml" in r.output and "Traceback" not in r.output
    if not torch.cuda.is_available():
        r = CliRunner().invoke(main, ["topo", "--device", "cuda"])
        assert r.exit_code == 1 and "no CUDA GPU" in r.output
    r = CliRunner().invoke(
        main, ["topo", "--device", "cpu", "--nproc", "2", "-o", str(tmp_path / "no" / "t.yaml")]
    )
    assert r.exit_code == 1 and "does not exist" in r.output  # before any process starts
    png = tmp_path / "topo.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)))
    r = CliRunner().invoke(main, ["profile", "--device", "cpu", "-t", str(png)])
    assert r.exit_code == 1 and "topo.png" in r.output and "Traceback" not in r.output
    r = CliRunner().invoke(
        main, ["adaptive", "bench", "--device", "cpu", "--nproc", "2", "-t", str(tmp_path / "x")]
    )
    assert r.exit_code == 2 and "does not exist" in r.output


def test_bench_times_one_call_at_a_time_and_back_to_back(S, tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    r = _run(
        [
            *("adaptive", "bench", "--device", "cpu", "--nproc", "2", "--colls", "allgather,allreduce"),
            *("--sizes", "4K", "--warmup", "1", "--iters", "2", "-o", str(out)),
        ]
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(out.read_text())["rows"]
    assert [row["collective"] for row in rows] == ["allgather", "allreduce"]
    for row in rows:
        assert row["same_as_native"] is True
        assert row["plan_loop_us"] > 0 and row["native_loop_us"] > 0
        assert row["loop_ratio"] == pytest.approx(row["native_loop_us"] / row["plan_loop_us"])
        assert row["plan_loop_busbw_gbps"] > 0
    assert "back to back: plan" in r.output


def test_without_torch_the_commands_say_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    for args in (["topo"], ["profile"], ["adaptive", "check"], ["adaptive", "bench"]):
        r = CliRunner().invoke(main, [*args, "--device", "cpu"])
        assert r.exit_code == 1 and "pip install '.[adaptive]'" in r.output, (args, r.output)
