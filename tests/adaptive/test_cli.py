"""`autoccl topo`, `autoccl profile` and `autoccl adaptive` on this machine's CPU ranks: a profiled topology
of the machine round-trips through the synthesizer and the executor. Bad input: one sentence, exit 1/2."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

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
        (["profile", "--device", "cpu", "--repeats", "0"], "x>=1"),
        (["adaptive", "check", "--device", "cpu", "--colls", "alltoall"], "collectives are"),
        (["adaptive", "check", "--device", "cpu", "-g", "torus:2x2", "--sizes", "x"], "element counts"),
        (["adaptive", "check", "--device", "cpu", "-g", "nope:2"], "nope"),
        (["topo", "--device", "cpu", "--nproc", "0"], "x>=1"),
    ],
)
def test_bad_input_is_one_sentence(S, args: list[str], message: str) -> None:
    r = CliRunner().invoke(main, args)
    assert r.exit_code in (1, 2), r.output
    assert message in r.output and "Traceback" not in r.output


@pytest.fixture
def no_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bad input is refused before any rank starts: starting one fails the test."""
    from autoccl.adaptive import jobs, launch

    def started(*args: object, **kwargs: object) -> None:
        raise AssertionError("processes started")

    monkeypatch.setattr(launch, "run_local", started)
    monkeypatch.setattr(jobs, "init_from_launcher", started)


def _two_ranks(tmp_path: Path) -> Path:
    p = tmp_path / "two.yaml"
    p.write_text(
        "npus: [a, b]\nlinks:\n  - {src: a, dst: b, latency_us: 1, bandwidth_gbps: 5}\n"
        "  - {src: b, dst: a, latency_us: 1, bandwidth_gbps: 5}\n"
    )
    return p


def _four_nodes(tmp_path: Path) -> Path:
    """A topology that lists its ranks under nodes: (as a generated one does), not npus:."""
    from autoccl.adaptive.jobs import generated_doc

    p = tmp_path / "nodes.json"
    p.write_text(json.dumps(generated_doc("torus:2x2")))
    return p


@pytest.mark.parametrize(
    "args,message",
    [
        # sizes: one line naming the option, exit 2, not a traceback from parse_size or from a rank
        (["profile", "--validate", "-1M"], "Invalid value for '--validate': size must be positive"),
        (["profile", "--validate", "0"], "Invalid value for '--validate': size must be positive"),
        (["profile", "--validate", "abc"], "Invalid value for '--validate': bad size 'abc'"),
        (["profile", "--validate", "1X"], "Invalid value for '--validate': bad size '1X'"),
        (["profile", "--validate", "1.5"], "'1.5' is not a whole number of bytes"),
        (
            ["adaptive", "bench", "--sizes", "inf"],
            "Invalid value for '--sizes': bad size 'inf': not a finite",
        ),
        (
            ["adaptive", "bench", "--sizes", "1M,nan"],
            "Invalid value for '--sizes': bad size 'nan': not a finite",
        ),
        (["adaptive", "bench", "--copy", "nan"], "Invalid value for '--copy': bad size 'nan': not a finite"),
        (
            ["profile", "--validate", "1e400M"],
            "Invalid value for '--validate': bad size '1e400M': not a finite",
        ),
        (["profile", "--validate", "0.3K"], "'0.3K' is not a whole number of bytes (307.2 bytes)"),
        (["profile", "--sizes", "0.5,1K"], "'0.5' is less than one byte"),
        (["adaptive", "bench", "--copy", "abc"], "Invalid value for '--copy': bad size 'abc'"),
        (["adaptive", "bench", "--sizes", ","], "give at least one size"),
        (["adaptive", "check", "--sizes", "-3"], "element counts are 0 or more, got -3"),
        (["adaptive", "check", "--sizes", "5,,3"], "element counts, e.g. 5,37"),
        (["adaptive", "check", "--sizes", str(10**30)], "past any tensor's size"),
        # an item named twice would run its cases twice
        (["adaptive", "check", "--sizes", "5,5"], "--sizes: names 5 more than once"),
        (["adaptive", "check", "--dtypes", "float32,float32"], "--dtypes: names float32 more than once"),
        (["adaptive", "check", "--colls", "allreduce,allreduce"], "--colls: names allreduce more than once"),
        (["adaptive", "bench", "--colls", "allgather,allgather"], "--colls: names allgather more than once"),
        # more than this machine could hold, refused before the ranks try to allocate it
        (["adaptive", "bench", "--sizes", "100T"], "more than a rank's share of this machine's memory"),
        (["profile", "--validate", "100T"], "more than a rank's share of this machine's memory"),
        (["adaptive", "check", "--sizes", str(10**14)], "more than a rank's share of this machine's memory"),
        # counts: click ranges
        (["adaptive", "bench", "--iters", "0"], "Invalid value for '--iters': 0 is not in the range x>=1"),
        (["adaptive", "bench", "--warmup", "-1"], "Invalid value for '--warmup'"),
        (["adaptive", "bench", "--seeds", "0"], "Invalid value for '--seeds'"),
        (["adaptive", "bench", "--chunks", "-1"], "Invalid value for '--chunks'"),
        (["adaptive", "bench", "--seeds", "99999999999"], "Invalid value for '--seeds'"),
        (["adaptive", "check", "--chunks", "99999999999"], "Invalid value for '--chunks'"),
        (["adaptive", "check", "-g", "torus:2x2", "--chunks", "600000000"], "the synthesizer takes at most"),
        (["adaptive", "check", "--nproc", "1"], "Invalid value for '--nproc': 1 is not in the range x>=2"),
        (["adaptive", "bench", "--nproc", "1"], "Invalid value for '--nproc': 1 is not in the range x>=2"),
        (["profile", "--nproc", "0"], "Invalid value for '--nproc'"),
        # the topology's ranks against --nproc
        (["adaptive", "check", "-g", "torus:2x2", "--nproc", "2"], "torus:2x2 has 4 ranks: give --nproc 4"),
        # paths: a picture matplotlib cannot write, two outputs on one file
        (["topo", "--nproc", "2", "--plot", "t.txt"], "Invalid value for '--plot': t.txt"),
        (["profile", "--plot", "measured"], "Invalid value for '--plot': measured"),
        (["profile", "-o", "a.yaml", "--report", "a.yaml"], "--out and --report name the same file"),
        (
            ["topo", "--nproc", "2", "-o", "t.yaml", "--reports", "./t.yaml"],
            "--out and --reports name the same",
        ),
    ],
)
def test_bad_values_are_refused_before_any_process_starts(
    S, no_processes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, [*args, "--device", "cpu"])
    assert r.exit_code == 2, r.output
    assert message in r.output and "Traceback" not in r.output and "Error: rank" not in r.output, r.output
    assert len(r.output.strip().splitlines()[-1]) > 20  # the reason, on the last line


def test_the_topologys_ranks_are_the_jobs(
    S, no_processes: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--nproc, or a launcher's WORLD_SIZE, against the topology's rank count, whichever way it lists its
    ranks (npus: or nodes:), before any process starts; a collective needs two ranks."""
    two, four = _two_ranks(tmp_path), _four_nodes(tmp_path)
    for args, message in [
        (["adaptive", "bench", "-t", str(two), "--nproc", "3"], "two.yaml has 2 ranks: give --nproc 2"),
        (["adaptive", "bench", "-t", str(four), "--nproc", "3"], "nodes.json has 4 ranks: give --nproc 4"),
        (["adaptive", "check", "-t", str(four), "--nproc", "2"], "nodes.json has 4 ranks: give --nproc 4"),
        (["profile", "-t", str(four), "--nproc", "3"], "nodes.json has 4 ranks: give --nproc 4"),
    ]:
        r = CliRunner().invoke(main, [*args, "--device", "cpu"])
        assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output, (args, r.output)
    one = tmp_path / "one.yaml"
    one.write_text("npus: [a]\nlinks: []\n")
    for verb in ("check", "bench"):
        r = CliRunner().invoke(main, ["adaptive", verb, "--device", "cpu", "-t", str(one)])
        assert r.exit_code == 1 and "one.yaml has 1 rank(s); a collective needs at least 2" in r.output
    monkeypatch.setenv("WORLD_SIZE", "3")
    monkeypatch.setenv("RANK", "0")
    r = CliRunner().invoke(main, ["adaptive", "check", "--device", "cpu", "-g", "torus:2x2"])
    assert r.exit_code == 1 and "torus:2x2 has 4 ranks and the launcher started 3" in r.output, r.output
    monkeypatch.setenv("WORLD_SIZE", "1")
    r = CliRunner().invoke(main, ["adaptive", "bench", "--device", "cpu"])
    assert r.exit_code == 1 and "a collective needs at least 2 ranks; the launcher started 1" in r.output


def test_one_job_and_one_topology_per_command(S, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ranks are resolved once and a given topology is built once in the command (it was built to
    validate it, then again to count its ranks); `adaptive check` without a topology runs one job, whose
    ranks detect it (it ran a detection job first, and under a launcher its rank 0 then waited alone)."""
    import autoccl.synth
    from autoccl.adaptive import launch

    doc = {"name": "fake", "npus": ["a", "b"], "links": []}
    results = {
        "check_job": {"cases": 0, "failures": []},
        "bench_job": {"rows": []},
        "profile_job": {
            "topology": doc,
            "model": "p2p",
            "profile": {"pairs": [], "contention": []},
            "seconds": 0.0,
        },
        "topo_job": {"topology": doc, "reports": []},
    }
    started: list[tuple[str, int, dict[str, Any]]] = []

    def run_local(job: Any, n: int, cfg: dict[str, Any], **kwargs: Any) -> list[Any]:
        started.append((job.__name__, n, cfg))
        return [results[job.__name__]]

    built: list[str] = []
    real_from_dict, real_gen = autoccl.synth.topology_from_dict, autoccl.synth.parse_gen_spec

    def from_dict(data: Any, source: str = "topology") -> Any:
        built.append(source)
        return real_from_dict(data, source)

    def gen(spec: str, *args: Any) -> Any:
        built.append(spec)
        return real_gen(spec, *args)

    monkeypatch.setattr(launch, "run_local", run_local)
    monkeypatch.setattr(autoccl.synth, "topology_from_dict", from_dict)
    monkeypatch.setattr(autoccl.synth, "parse_gen_spec", gen)
    four = str(_four_nodes(tmp_path))
    for args, job, n, sources in [
        (["adaptive", "check", "--nproc", "3"], "check_job", 3, []),
        (["adaptive", "check", "-g", "torus:2x2"], "check_job", 4, ["torus:2x2"]),
        (["adaptive", "check", "-t", four], "check_job", 4, [four]),
        (["adaptive", "bench", "-t", four, "--sizes", "4K"], "bench_job", 4, [four]),
        (["adaptive", "bench", "--nproc", "2", "--sizes", "4K"], "bench_job", 2, []),
        (["profile", "-t", four, "--sizes", "4K,8K"], "profile_job", 4, [four]),
        (["topo", "--nproc", "2"], "topo_job", 2, []),
    ]:
        started.clear()
        built.clear()
        r = CliRunner().invoke(main, [*args, "--device", "cpu"])
        assert r.exit_code == 0, (args, r.output)
        assert [(name, ranks) for name, ranks, _ in started] == [(job, n)], args
        assert built == sources, args
        if job in ("check_job", "bench_job"):  # None: the job's ranks detect the topology
            assert (started[0][2]["topology"] is None) == (not sources), args


def test_ranks_against_the_gpus(S, no_processes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """One rank per GPU, checked before any process starts (here one GPU, as torch is told)."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    for args, message in [
        (
            ["adaptive", "check"],
            "a collective needs at least 2 ranks and only 1 GPU is visible (one rank per GPU)",
        ),
        (["adaptive", "bench", "--nproc", "2"], "--nproc 2: only 1 GPU(s) visible (one rank per GPU)"),
        (["adaptive", "check", "-g", "torus:2x2"], "torus:2x2 has 4 ranks and only 1 GPU(s) are visible"),
        (["profile", "--nproc", "3"], "--nproc 3: only 1 GPU(s) visible"),
    ]:
        r = CliRunner().invoke(main, [*args, "--device", "cuda"])
        assert r.exit_code == 1 and message in r.output and "Traceback" not in r.output, (args, r.output)


@pytest.mark.timeout(300)
def test_check_under_a_launcher_without_a_topology(S, tmp_path: Path) -> None:
    """torchrun's ranks detect the topology and check in one job (rank 0 had waited for ranks gone)."""
    import os
    import subprocess
    import sys

    from autoccl.tuner_env import free_port

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "python")}
    cmd = [
        *(sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"),
        *("--master_addr", "127.0.0.1", "--master_port", str(free_port())),
        *("-m", "autoccl", "adaptive", "check", "--device", "cpu", "--colls", "allreduce"),
        *("--dtypes", "float32"),
    ]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "cases on rank 0, 0 failure(s)" in p.stdout, p.stdout + p.stderr


def test_profile_of_a_topology_that_lists_nodes(S, tmp_path: Path) -> None:
    """A structure with nodes: instead of npus: (a generated topology written out) is profiled under its own
    rank names; it was a KeyError."""
    from autoccl.adaptive.jobs import generated_doc

    doc = generated_doc("torus:2x2")
    doc["nodes"], doc["links"] = (
        doc["nodes"][:2],
        [link for link in doc["links"] if {link["src"], link["dst"]} == {"npu0", "npu1"}],
    )
    doc.pop("dims", None)
    src, out = tmp_path / "nodes.json", tmp_path / "measured.yaml"
    src.write_text(json.dumps(doc))
    r = _run(
        [
            *("profile", "--device", "cpu", "-t", str(src), "-o", str(out)),
            *("--sizes", "4K,16K", "--repeats", "1"),
        ]
    )
    assert r.exit_code == 0, r.output
    assert S.load_topology(out).ranks == ["npu0", "npu1"]


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


def test_profile_says_when_a_pair_fits_no_line(S, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A pair whose times fit no line has a lower bound for its bandwidth and no error bars: it is said so,
    not printed as "alpha 0.00 +- 0.00 us, beta 0.133 +- 0.000 GB/s"; the report holds null errors."""
    from autoccl.adaptive import launch, profile

    a, b, ae, be = profile.fit_alpha_beta([1, 4096, 16384], [130.0, 119.3, 123.4])
    unfitted = profile.PairFit(
        0, 1, a / 2, b, ae / 2, be, [4096, 16384], [119.3, 123.4], fitted=not math.isnan(be)
    )
    fitted = profile.PairFit(1, 0, 5.0, 2.0, 0.5, 0.1, [4096, 16384], [7.0, 13.0])
    doc = {"name": "fake", "npus": ["a", "b"], "links": []}
    result = {
        "topology": doc,
        "model": "p2p",
        "profile": profile.Profile(2, "cpu", [unfitted, fitted], []).to_dict(),
        "seconds": 0.0,
    }
    monkeypatch.setattr(launch, "run_local", lambda *args, **kwargs: [result])
    report = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["profile", "--device", "cpu", "--nproc", "2", "--report", str(report)])
    assert r.exit_code == 0, r.output
    assert "0 -> 1: no fit (the times fall or stay flat with size): beta at least 0.133 GB/s" in r.output
    assert "1 -> 0: alpha 5.00 +- 0.50 us, beta 2.000 +- 0.100 GB/s" in r.output
    assert "nan" not in r.output and "+- 0.000" not in r.output, r.output
    pairs = json.loads(report.read_text())["profile"]["pairs"]
    assert pairs[0]["fitted"] is False and pairs[0]["bandwidth_err_gbps"] is None


def test_profile_says_which_fits_are_doubtful(S, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four CPU ranks on two busy cores gave "alpha 206.62 +- 222.82 us, beta 9.571 +- 84.298 GB/s" and an
    alpha clamped at 0, written as measured without a word. Such fits are named with the reason, counted in
    one line, and more ranks than cores are said before the job starts."""
    from autoccl.adaptive import launch, profile

    pairs = [
        profile.PairFit(0, 1, 206.62, 9.571, 222.82, 84.298, [4096, 16384], [300.0, 310.0]),
        profile.PairFit(1, 0, 0.0, 0.563, 58.67, 0.1, [4096, 16384], [7.0, 13.0]),
        profile.PairFit(0, 2, 5.0, 2.0, 0.5, 0.1, [4096, 16384], [7.0, 13.0]),
    ]
    result = {
        "topology": {"name": "fake", "npus": ["a", "b", "c"], "links": []},
        "model": "p2p",
        "profile": profile.Profile(3, "cpu", pairs, []).to_dict(),
        "seconds": 0.0,
    }
    monkeypatch.setattr(launch, "run_local", lambda *args, **kwargs: [result])
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    r = CliRunner().invoke(main, ["profile", "--device", "cpu", "--nproc", "3"])
    assert r.exit_code == 0, r.output
    assert "3 ranks on 2 CPU cores" in r.output, r.output
    lines = {ln.split(":")[0].strip(): ln for ln in r.output.splitlines() if "->" in ln}
    want = "doubtful: beta's error bar is above half its value; alpha's error bar"
    assert want in lines["0 -> 1"], r.output
    assert "doubtful: alpha clamped at 0" in lines["1 -> 0"], r.output
    assert "doubtful" not in lines["0 -> 2"], r.output
    assert "2 of 3 link fits are doubtful" in r.output, r.output


def test_check_and_bench_take_the_generator_parameters_synth_takes(S, tmp_path: Path) -> None:
    """`adaptive check -g` took no --bw, --lat or --gen-opt and `adaptive bench` no -g at all, where synth
    takes them all: both take the same generator options now, refuse them without -g, and name a bad one."""
    runner = CliRunner()
    r = runner.invoke(main, ["adaptive", "check", "--device", "cpu", "-g", "ring:2", "--bw", "0"])
    assert r.exit_code != 0 and "bandwidth" in r.output, r.output
    r = runner.invoke(main, ["adaptive", "bench", "--device", "cpu", "-g", "ring:2", "--gen-opt", "rails"])
    assert r.exit_code != 0 and "'rails': expected key=value" in r.output, r.output
    for verb in ("check", "bench"):
        r = runner.invoke(main, ["adaptive", verb, "--device", "cpu", "--lat", "3"])
        assert r.exit_code != 0 and "parameters of --gen's generator" in r.output, (verb, r.output)
    out = tmp_path / "b.json"
    args = ["--device", "cpu", "-g", "switch:2", "--bw", "7.5", "--colls", "allgather", "--sizes", "4K"]
    r = runner.invoke(main, ["adaptive", "bench", *args, "--iters", "1", "--warmup", "0", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["topology"]["links"][0]["bandwidth_gbps"] == 7.5
