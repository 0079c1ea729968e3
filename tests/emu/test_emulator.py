"""The emulator itself, driven by its small test plugin (no dependency on the product library)."""

from __future__ import annotations

import json
import math
import random
import re
import subprocess
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean, assert_default

from autoccl.emu import Call, Comm, Group, Host, Scenario, run, simple
from autoccl.emu.model import PerfModel, default_chunk
from autoccl.emu.runner import DEFAULT_MODEL


def two_comms(**kw: int) -> Scenario:
    comms = [Comm("a", 0x1111, (0, 1, 2, 3)), Comm("b", 0x2222, (0, 1, 2, 3), channels=32)]
    groups = [
        Group("a", (Call("allreduce", 64 << 20),), repeat=4),
        Group("b", (Call("reducescatter", 16 << 20),), repeat=3),
        Group("a", (Call("allgather", 1 << 20), Call("allgather", 2 << 20)), repeat=3),
        Group("b", (Call("broadcast", 65536),), repeat=2),
    ]
    return Scenario(comms, groups, orders={1: "reverse", 2: "random", 3: "sequential"}, **kw)


@pytest.mark.sanitize
def test_no_plugin_applies_nccl_rule(emulator: Path) -> None:
    res = run(two_comms(), plugin=None, trace=False)
    assert_clean(res)
    assert_default(res.calls)
    big = [r for r in res.calls if r["coll"] == "allreduce"]
    assert {(r["algo"], r["proto"], r["channels"]) for r in big} == {("ring", "simple", 24)}
    assert all(r["channels"] <= r["comm_channels"] for r in res.calls)
    # seqNumber per function and comm: identical on every rank for the same call
    seqs: dict[tuple[str, int, int, int], set[int]] = {}
    for r in res.calls:
        seqs.setdefault((r["comm"], r["group"], r["rep"], r["op"]), set()).add(r["seq"])
    assert all(len(s) == 1 for s in seqs.values())
    assert len(res.calls) == 4 * (4 + 3 + 6 + 2)


@pytest.mark.sanitize
@pytest.mark.parametrize("version", ["6", "5"])
def test_testplugin_fixed_all_ranks(testplugin: Path, version: str) -> None:
    env = {"EMU_TEST_PLUGIN": "fixed:ring/ll128/8/131072"}
    res = run(
        two_comms(runahead=3, reorder=4), plugin=testplugin, env=env, tuner_version=version, trace=False
    )
    assert_clean(res)
    assert res.summaries[0]["tuner"] == int(version)
    for r in res.calls:
        assert (r["algo"], r["proto"], r["channels"]) == ("ring", "ll128", 8)
        # chunk only through tuner v6; NCCL aligns to the LL128 grain (1920 B)
        assert r["chunk"] == (130560 if version == "6" else 576000)


def test_relative_plugin_path_is_loaded(testplugin: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulator runs in the run's directory: a plugin given relative to the caller's is still found
    (it once ran without a tuner, and a benchmark measured plain NCCL in every mode)."""
    monkeypatch.chdir(testplugin.parent.parent)
    rel = Path(testplugin.parent.name) / testplugin.name
    res = run(simple(repeat=2), plugin=rel, env={"EMU_TEST_PLUGIN": "fixed:ring/ll128/8/131072"}, trace=False)
    assert_clean(res)
    assert {(r["proto"], r["channels"]) for r in res.calls} == {("ll128", 8)}


def test_divergence_detected_threads_and_processes(testplugin: Path) -> None:
    env = {"EMU_TEST_PLUGIN": "diverge"}
    res = run(simple(repeat=3), plugin=testplugin, env=env, trace=False)
    assert res.returncode == 3
    assert "DIVERGENCE" in res.stderr
    res = run(simple(repeat=3), plugin=testplugin, env=env, processes=True, trace=False)
    assert res.divergences  # found by the driver across processes


def test_unsupported_pair_is_flagged(testplugin: Path) -> None:
    res = run(simple(repeat=2), plugin=testplugin, env={"EMU_TEST_PLUGIN": "unsupported"}, trace=False)
    assert res.returncode == 3 and res.violations > 0
    assert "unsupported pair" in res.stderr


def test_tuner_init_failure_fails_comm(testplugin: Path) -> None:
    res = run(simple(repeat=2), plugin=testplugin, env={"EMU_TEST_PLUGIN": "initfail"}, trace=False)
    assert res.returncode == 1 and res.errors > 0


@pytest.mark.sanitize
@pytest.mark.parametrize("processes", [False, True])
def test_kernel_events_delivered_under_reordering(testplugin: Path, tmp_path: Path, processes: bool) -> None:
    trace = tmp_path / "tp.jsonl"
    sc = two_comms(runahead=6, reorder=16)
    res = run(
        sc,
        plugin=testplugin,
        env={"EMU_TEST_PLUGIN": "", "EMU_TEST_PLUGIN_TRACE": str(trace) if not processes else ""},
        processes=processes,
        trace=False,
    )
    assert_clean(res)
    if processes:
        return
    seen = [json.loads(ln) for ln in trace.read_text().splitlines()]
    truth = {(int(r["hash"], 16), r["rank"], r["coll"], r["seq"]): r for r in res.calls}
    assert len(seen) == len(res.calls)
    names = {"AllReduce": "allreduce", "ReduceScatter": "reducescatter", "AllGather": "allgather"}
    names["Broadcast"] = "broadcast"
    for s in seen:
        r = truth[(int(s["comm"], 16), s["rank"], names[s["func"]], s["seq"])]
        assert s["dur_ns"] == r["dur_ns"]
        assert s["channels"] == r["used_channels"]
        assert s["algo"] == r["algo"].upper() and s["proto"] == r["proto"].upper()


def test_nccl_algo_proto_env(emulator: Path) -> None:
    res = run(two_comms(), plugin=None, env={"NCCL_PROTO": "LL"}, trace=False)
    assert_clean(res)
    assert {r["proto"] for r in res.calls} == {"ll"}
    res = run(two_comms(), plugin=None, env={"NCCL_ALGO": "ring;allreduce:tree"}, trace=False)
    assert_clean(res)
    assert {r["algo"] for r in res.calls if r["coll"] == "allreduce"} == {"tree"}
    assert {r["algo"] for r in res.calls if r["coll"] != "allreduce"} == {"ring"}
    res = run(two_comms(), plugin=None, env={"NCCL_ALGO": "Tree"}, trace=False)
    assert res.returncode == 1  # AllGather has no algorithm left: NCCL fails the call
    res = run(two_comms(), plugin=None, env={"NCCL_PROTO": "bogus"}, trace=False)
    assert res.returncode == 2


def test_min_ctas_raises_ceiling(testplugin: Path) -> None:
    env = {"EMU_TEST_PLUGIN": "fixed:ring/simple/48/0"}
    res = run(simple(repeat=2), plugin=testplugin, env=env, trace=False)
    assert {r["channels"] for r in res.calls} == {24}  # capped by the comm's channel count
    res = run(simple(repeat=2), plugin=testplugin, env={**env, "NCCL_MIN_CTAS": "64"}, trace=False)
    assert {r["channels"] for r in res.calls} == {48}
    assert {r["comm_channels"] for r in res.calls} == {64}


def test_channels_above_the_spread_are_timed_as_the_spread(testplugin: Path) -> None:
    """A request for more channels than a small task spreads over (>= 32 KiB of traffic each) runs, is
    timed and is reported on the spread: allreduce 256 KiB (512 KiB of traffic) uses 16 of 24 channels."""
    comms = [Comm("s", 0x5151, (0, 1, 2, 3))]
    sc = Scenario(comms, [Group("s", (Call("allreduce", 256 << 10),), repeat=3)], noise=False)
    model = PerfModel.load_file(DEFAULT_MODEL)
    for asked in (24, 16):
        res = run(sc, plugin=testplugin, env={"EMU_TEST_PLUGIN": f"fixed:ring/ll/{asked}/0"}, trace=False)
        assert_clean(res)
        for r in res.calls:
            assert r["used_channels"] == 16, r
            want = model.mean_us("allreduce", 4, 256 << 10, "ring", "ll", 16, r["chunk"], 0.0)
            assert r["model_us"] == pytest.approx(want, rel=1e-3), (asked, r)


def lead_violations(
    calls: list[dict[str, Any]], comm_ranks: dict[str, tuple[int, ...]], lead: int, key: str = "host_seq"
) -> int:
    """Groups a host started (`key`: host_seq, the order within one process, or host_ns, the monotonic clock
    of the machine) before every other rank of the communicator had started the group `lead` positions
    earlier."""
    start: dict[tuple[str, int, int], int] = {}
    for r in calls:
        start[(r["comm"], int(r["grank"]), int(r["group"]))] = int(r[key])
    bad = 0
    for (comm, grank, pos), seq in start.items():
        if pos - lead < 0:
            continue
        bad += any(start[(comm, o, pos - lead)] > seq for o in comm_ranks[comm] if o != grank)
    return bad


@pytest.mark.sanitize
def test_lead_bounds_run_ahead(testplugin: Path) -> None:
    """Scenario.lead: no host starts a group more than `lead` groups ahead of its communicator's slowest rank
    (checked on the order the hosts really started their groups); without it a fast rank runs far ahead."""
    sc = replace(two_comms(runahead=3, reorder=4), orders={1: "reverse"})
    sc = replace(sc, groups=[replace(g, repeat=g.repeat * 10) for g in sc.groups])
    sc = replace(sc, hosts={2: Host(delay_us=300)})  # rank 2's host is slow: the others would run ahead
    ranks = {c.name: c.ranks for c in sc.comms}
    env = {"EMU_TEST_PLUGIN": ""}
    unbounded = run(sc, plugin=testplugin, env=env, trace=False)
    assert_clean(unbounded)
    assert lead_violations(unbounded.calls, ranks, 2) > 0  # the check can fail
    bounded = run(replace(sc, lead=2), plugin=testplugin, env=env, trace=False)
    assert_clean(bounded)
    assert lead_violations(bounded.calls, ranks, 2) == 0
    assert len(bounded.calls) == len(unbounded.calls)


def test_lead_bounds_run_ahead_across_processes(testplugin: Path, tmp_path: Path) -> None:
    """With one process per rank the bound holds between processes (they share a lead file): checked on the
    machine's monotonic clock at which each host started each group."""
    sc = replace(two_comms(runahead=3, reorder=4), orders={1: "reverse"})
    sc = replace(sc, groups=[replace(g, repeat=g.repeat * 10) for g in sc.groups])
    sc = replace(sc, hosts={2: Host(delay_us=300)})
    ranks = {c.name: c.ranks for c in sc.comms}
    env = {"EMU_TEST_PLUGIN": ""}
    unbounded = run(sc, plugin=testplugin, env=env, trace=False, processes=True)
    assert_clean(unbounded)
    assert lead_violations(unbounded.calls, ranks, 2, key="host_ns") > 0  # the check can fail
    for _ in range(2):  # the second run in the same directory starts from a fresh lead file
        bounded = run(
            replace(sc, lead=2), plugin=testplugin, env=env, trace=False, processes=True, workdir=tmp_path
        )
        assert_clean(bounded)
        assert lead_violations(bounded.calls, ranks, 2, key="host_ns") == 0
        assert len(bounded.calls) == len(unbounded.calls)


def test_lead_across_processes_ends_with_a_killed_process(testplugin: Path) -> None:
    """A rank's process killed mid-run (kill -9, no goodbye) no longer holds the others back: they finish
    their programs at once, not after the 20 s wait that ends the bound with an error."""
    sc = replace(two_comms(), orders={}, lead=1, hosts={1: Host(kill_after=3)})
    sc = replace(sc, groups=[replace(g, repeat=g.repeat * 5) for g in sc.groups])
    res = run(sc, plugin=testplugin, env={"EMU_TEST_PLUGIN": ""}, trace=False, processes=True, timeout=60)
    by_rank = {tuple(p.ranks): p for p in res.procs}
    assert by_rank[(1,)].returncode == -9
    for r in (0, 2, 3):
        assert by_rank[(r,)].returncode == 0, by_rank[(r,)].stderr
        assert "waited 20 s" not in by_rank[(r,)].stderr
        assert sum(1 for c in res.calls if c["grank"] == r) == 5 * (4 + 3 + 6 + 2)
    assert max(float(s["wall_s"]) for s in res.summaries) < 15


def test_lead_deadlock_is_a_clear_error(testplugin: Path) -> None:
    """Orders that cannot keep the bound (rank 3 plays comm a's whole program first) end the bound at once
    with an error naming who waits for whom, then run to the end unbounded: no hang."""
    sc = replace(two_comms(), orders={3: "sequential"}, lead=1)
    res = run(sc, plugin=testplugin, env={"EMU_TEST_PLUGIN": ""}, trace=False, timeout=15)
    assert res.returncode != 0
    assert "deadlock under this bound" in res.stderr and "waits for rank" in res.stderr, res.stderr
    assert len(res.calls) == 4 * (4 + 3 + 6 + 2)  # every call still played


def test_graph_capture_has_no_kernel_events(testplugin: Path, tmp_path: Path) -> None:
    trace = tmp_path / "tp.jsonl"
    comms = [Comm("g", 0x77, (0, 1))]
    groups = [
        Group("g", (Call("allreduce", 8 << 20),), repeat=5, graph=True),
        Group("g", (Call("allreduce", 1 << 20),)),
    ]
    res = run(
        Scenario(comms, groups), plugin=testplugin, env={"EMU_TEST_PLUGIN_TRACE": str(trace)}, trace=False
    )
    assert_clean(res)
    captured = [r for r in res.calls if r["graph"] == 1]
    assert len(captured) == 2 and len(res.replays) == 2 * 5
    seen = [json.loads(ln) for ln in trace.read_text().splitlines()]
    assert len(seen) == 2 and all(s["count"] == (1 << 20) // 4 for s in seen)


def test_aggregation_merges_within_4x(emulator: Path) -> None:
    comms = [Comm("x", 0x5, (0, 1, 2, 3))]
    groups = [
        Group("x", (Call("allreduce", 1 << 20), Call("allreduce", 2 << 20), Call("allreduce", 3 << 20))),
        Group("x", (Call("allreduce", 1 << 20), Call("allreduce", 8 << 20))),
    ]
    res = run(Scenario(comms, groups), plugin=None, trace=False)
    assert_clean(res)
    g0 = [r for r in res.calls if r["group"] == 0 and r["rank"] == 0]
    assert {r["task_bytes"] for r in g0} == {6 << 20} and {r["batch"] for r in g0} == {0}
    g1 = [r for r in res.calls if r["group"] == 1 and r["rank"] == 0]
    assert {r["task_bytes"] for r in g1} == {1 << 20, 8 << 20}


def test_bad_scenario_rejected(emulator: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    for text in [
        "",
        "autoccl-emu-scenario 1\n",
        "autoccl-emu-scenario 1\ncomm name=a hash=zz ranks=0\n",
        "autoccl-emu-scenario 1\ncomm name=a hash=1 ranks=0\ngroup comm=a colls=allreduce:0\n",
    ]:
        bad.write_text(text)
        p = subprocess.run(
            [str(emulator), "--scenario", str(bad), "--ranks", "0"], capture_output=True, text=True
        )
        assert p.returncode == 2, (text, p.stderr)


def test_call_of_partial_elements_is_refused(emulator: Path, tmp_path: Path) -> None:
    """NCCL counts elements (per rank for all-gather / reduce-scatter): a byte count that is not a whole
    number of them is no call an application makes, and its profiler count would not match the tuner's bytes
    (a 3-rank demo's all-gathers were never timed). The emulator refuses it, as does the Python scenario."""
    sc = tmp_path / "sc.txt"
    head = "autoccl-emu-scenario 1\ncomm name=a hash=1 ranks=0,1,2\n"
    for colls, says in [
        ("allgather:1048576", "allgather of 1048576 bytes: not a multiple of 3 ranks x 4-byte elements"),
        ("reducescatter:1048580 dtype=bf16", "reducescatter of 1048580 bytes: not a multiple of 3 ranks x 2"),
        ("allreduce:1048578", "allreduce of 1048578 bytes: not a multiple of 4-byte elements"),
    ]:
        sc.write_text(head + f"group comm=a colls={colls}\n")
        cmd = [str(emulator), "--scenario", str(sc), "--ranks", "0"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 2 and says in p.stderr, (colls, p.stderr)
    for colls in ("allgather:1048572", "reducescatter:1048578 dtype=i8", "allreduce:1048578 dtype=bf16"):
        sc.write_text(head + f"group comm=a colls={colls}\n")
        cmd = [str(emulator), "--scenario", str(sc), "--ranks", "0,1,2"]
        p = subprocess.run(cmd, capture_output=True, text=True)
        assert p.returncode == 0, (colls, p.stderr)
    comm = Comm("a", 1, (0, 1, 2))
    with pytest.raises(ValueError, match="allgather of 1048576 bytes on comm a: not a multiple of 3 ranks x"):
        Scenario([comm], [Group("a", (Call("allgather", 1 << 20),))]).to_text()
    Scenario([comm], [Group("a", (Call("allgather", (1 << 20) - 4),))]).to_text()


def test_bad_ranks_and_eval_lines_are_refused(emulator: Path, tmp_path: Path) -> None:
    sc = tmp_path / "sc.txt"
    sc.write_text(
        "autoccl-emu-scenario 1\ncomm name=a hash=1 ranks=0,1\ngroup comm=a colls=allreduce:1048576\n"
    )
    for ranks, says in [("0,0", "rank 0 twice"), ("0,x", "distinct ranks"), ("-1", "distinct ranks")]:
        p = subprocess.run(
            [str(emulator), "--scenario", str(sc), "--ranks", ranks], capture_output=True, text=True
        )
        assert p.returncode == 2 and says in p.stderr, (ranks, p.stderr)
    # one output line per query line, nan where it is not a valid query, each named on stderr, exit 2
    queries = [
        "allreduce 4 1048576 ring simple 24 0 0",
        "garbage",
        "allreduce 4 1048576 ring bogus 24 0 0",
        "allreduce 4 -1 ring simple 24 0 0",
        "allreduce 4 1048576 ring simple 24 0 0 extra",
    ]
    p = subprocess.run([str(emulator), "--eval"], input="\n".join(queries), capture_output=True, text=True)
    out = p.stdout.split()
    assert p.returncode == 2 and len(out) == 5
    assert float(out[0]) > 0 and out[1:] == ["nan"] * 4
    for line in (2, 3, 4, 5):
        assert f"--eval line {line}:" in p.stderr


def test_cpp_model_matches_python(emulator: Path) -> None:
    model = PerfModel.load_file(DEFAULT_MODEL)
    rng = random.Random(5)
    lines, want = [], []
    for _ in range(200):
        coll = rng.choice(["allreduce", "allgather", "reducescatter", "broadcast", "reduce"])
        algo, proto = rng.choice([("ring", "simple"), ("ring", "ll"), ("ring", "ll128"), ("tree", "simple")])
        nbytes, ch = rng.randint(1, 1 << 30), rng.randint(1, 64)
        chunk = rng.choice([0, default_chunk(coll, algo, proto), rng.randint(512, 1 << 22)])
        load = rng.choice([0.0, 0.35, 1.0])
        lines.append(f"{coll} 4 {nbytes} {algo} {proto} {ch} {chunk} {load}")
        want.append(model.mean_us(coll, 4, nbytes, algo, proto, ch, chunk, load))
    p = subprocess.run(
        [str(emulator), "--eval", "--model", str(DEFAULT_MODEL)],
        input="\n".join(lines),
        capture_output=True,
        text=True,
    )
    got = [float(x) for x in p.stdout.split()]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g == pytest.approx(w, rel=1e-5)


def test_model_shape(emulator: Path) -> None:
    """The calibrated model reproduces the measured facts the tuner is meant to exploit."""
    m = PerfModel.load_file(DEFAULT_MODEL)

    def t(coll: str, n: int, ch: int, proto: str = "simple", load: float = 0.0) -> float:
        return m.mean_us(coll, 4, n, "ring", proto, ch, default_chunk(coll, "ring", proto), load)

    assert t("allreduce", 1 << 30, 4) > 3 * t("allreduce", 1 << 30, 24)  # channels matter
    assert t("allgather", 4 << 20, 24, "ll128") < t("allgather", 4 << 20, 24)  # LL128 wins at 4 MB AllGather
    assert t("allgather", 1 << 30, 24, "ll") > 2 * t("allgather", 1 << 30, 24)  # LL loses big
    assert t("allreduce", 64 << 20, 24, load=1.0) > 1.5 * t("allreduce", 64 << 20, 24)  # GEMM slows comm
    assert m.gemm_slowdown(64, 1.0) > m.gemm_slowdown(8, 1.0)  # more channels slow the GEMM

    # Chunks, as measured on 2 x H200 with 64 channels (h200x2/nccl-2.30-chunk-size/probe): LL128 / 4
    # 9-10 % faster at 64 MiB, nothing at 4 MiB (a step's data is one piece either way), 128 KiB pieces 7-10 %
    # slower than 1 MiB ones at 1 GiB (per-piece cost).
    def c(coll: str, n: int, proto: str, chunk: int) -> float:
        return m.mean_us(coll, 2, n, "ring", proto, 64, chunk, 0.0)

    for coll in ("allgather", "reducescatter", "allreduce"):
        assert c(coll, 64 << 20, "ll128", 144000) < 0.95 * c(coll, 64 << 20, "ll128", 576000)
        assert c(coll, 4 << 20, "simple", 262144) == pytest.approx(
            c(coll, 4 << 20, "simple", 2 << 20), rel=0.005
        )
        assert c(coll, 1 << 30, "simple", 128 << 10) > 1.03 * c(coll, 1 << 30, "simple", 1 << 20)


def test_run_without_workdir_leaves_nothing(
    emulator: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's scratch directory goes once its results are read; AUTOCCL_EMU_KEEP=1 keeps it."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.delenv("AUTOCCL_EMU_KEEP", raising=False)
    res = run(two_comms(), plugin=None)
    assert_clean(res)
    assert res.trace == [] and len(res.calls) == 4 * (4 + 3 + 6 + 2)
    assert res.workdir is None
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv("AUTOCCL_EMU_KEEP", "1")
    kept = run(two_comms(), plugin=None, trace=False)
    assert kept.workdir is not None and kept.workdir.parent == tmp_path
    assert (kept.workdir / "scenario.txt").is_file()


def _scenario_error(emulator: Path, tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    sc = tmp_path / "sc.txt"
    sc.write_text("autoccl-emu-scenario 1\ncomm name=a hash=1 ranks=0,1\n" + body)
    return subprocess.run(
        [str(emulator), "--scenario", str(sc), "--ranks", "0,1", "--truth", str(tmp_path / "t.jsonl")],
        capture_output=True,
        text=True,
    )


def test_infinite_load_is_refused(emulator: Path, tmp_path: Path) -> None:
    """An infinite load made every kernel time infinite, wrote `inf` into the truth (no JSON: the driver read
    no call at all) and exited 0."""
    for body in ("load inf\n", "group comm=a colls=allreduce:1048576 load=inf\n", "load 1e400\n"):
        p = _scenario_error(emulator, tmp_path, body)
        assert p.returncode == 2 and "bad load (a finite number >= 0)" in p.stderr, (body, p.stderr)
    sc = Scenario([Comm("a", 1, (0, 1))], [Group("a", (Call("allreduce", 1 << 20),), load=5.0)])
    res = run(sc, plugin=None)
    assert res.returncode == 0 and len(res.calls) == 2, res.stderr


@pytest.mark.parametrize(
    ("body", "says"),
    [
        # a misspelt key was dropped: repeat=20 ran once, and the run exited 0
        ("group comm=a colls=allreduce:1048576 repat=20\n", "group: unknown key 'repat' (known: comm,"),
        ("group comm=a colls=allreduce:1048576 repeat=2 repeat=3\n", "group: key 'repeat' given twice"),
        ("group comm=a colls=allreduce:1048576 extra\n", "group: 'extra' is no key=value"),
        ("comm name=b hash=2 ranks=0,1 chanels=8\n", "comm: unknown key 'chanels'"),
        ("hidden algo=ring ns=5 protocol=ll\n", "hidden: unknown key 'protocol'"),
        ("order rank=1 policy=reverse pol=x\n", "order: unknown key 'pol'"),
        ("host rank=1 =5\n", "host: '=5' is no key=value"),
    ],
)
def test_unknown_and_repeated_keys_are_refused(emulator: Path, tmp_path: Path, body: str, says: str) -> None:
    p = _scenario_error(emulator, tmp_path, body)
    assert p.returncode == 2 and says in p.stderr, p.stderr


def test_shared_comm_hash_is_refused(emulator: Path, tmp_path: Path) -> None:
    """NCCL gives each communicator its own hash and plugins keep their state per hash: two comms of one
    hash ran (exit 0) with one plugin state for both."""
    p = _scenario_error(emulator, tmp_path, "comm name=b hash=0x1 ranks=0\n")
    assert p.returncode == 2 and "comm b: hash=0x1 is already comm a's" in p.stderr, p.stderr


def test_bad_call_says_what_is_wrong(emulator: Path, tmp_path: Path) -> None:
    for call, says in [
        ("alltoall:1048576", "unknown collective (allreduce, allgather, reducescatter, broadcast, reduce)"),
        ("allreduce:1e6", "bytes must be an integer in [1, 2^40]"),
        ("allreduce:0", "bytes must be an integer in [1, 2^40]"),
    ]:
        p = _scenario_error(emulator, tmp_path, f"group comm=a colls={call}\n")
        assert p.returncode == 2 and f"bad call {call}: {says}" in p.stderr, p.stderr


def test_command_line_errors_name_the_option(emulator: Path, tmp_path: Path) -> None:
    """A bad command line printed the usage text alone, naming neither the option nor what it takes."""
    sc = tmp_path / "sc.txt"
    sc.write_text("autoccl-emu-scenario 1\ncomm name=a hash=1 ranks=0\n")
    base = [str(emulator), "--scenario", str(sc), "--ranks", "0"]
    for args, says in [
        (["--bogus"], "autoccl-emu: unknown option '--bogus'"),
        (["--truth"], "autoccl-emu: --truth needs a value"),
        (["--tuner-version", "7"], "autoccl-emu: --tuner-version takes auto|5|6, not '7'"),
        (["--profiler-version", "x"], "autoccl-emu: --profiler-version takes auto|5|6|7, not 'x'"),
        (["--scenario", str(sc)], "autoccl-emu: --scenario given twice"),
        (["--ranks", "1"], "autoccl-emu: --ranks given twice"),
        (["--plugin", "x.so", "--no-plugin"], "autoccl-emu: --plugin and --no-plugin exclude each other"),
    ]:
        p = subprocess.run(base + args, capture_output=True, text=True)
        assert p.returncode == 2 and says in p.stderr, (args, p.stderr)
    p = subprocess.run([str(emulator), "--ranks", "0"], capture_output=True, text=True)
    assert p.returncode == 2 and "autoccl-emu: --scenario FILE is required" in p.stderr, p.stderr
    p = subprocess.run([str(emulator), "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.startswith("usage: autoccl-emu") and not p.stderr


@pytest.mark.parametrize("processes", [False, True])
def test_run_of_a_scenario_without_ranks_raises(emulator: Path, processes: bool) -> None:
    """With one process per rank no process started and the run returned exit 0, as if it had played."""
    with pytest.raises(ValueError, match="no rank to play"):
        run(Scenario([], []), plugin=None, processes=processes)


def test_run_with_a_plugin_path_that_is_no_file_raises(emulator: Path, tmp_path: Path) -> None:
    """The emulator, as NCCL, runs without a tuner when the plugin does not load, and exited 0: a run of plain
    NCCL that a caller took for the plugin's."""
    for missing in (tmp_path / "nonexistent.so", tmp_path):
        with pytest.raises(ValueError, match="no such file"):
            run(simple(nranks=2, repeat=2), plugin=missing)


def test_refused_scenario_leaves_no_directory(
    emulator: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temporary directory was made before the scenario was written: a refused one stayed behind."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sc = Scenario([Comm("a", 1, (0, 1))], [Group("a", (Call("allreduce", 1024),), dtype="f64")])
    with pytest.raises(ValueError, match="unknown dtype"):
        run(sc, plugin=None)
    assert list(tmp_path.iterdir()) == []


def test_comm_name_and_call_size_are_checked_in_python() -> None:
    """A comm name with a space was written into the scenario as two words (the emulator named the comm by
    the first one); a float size became "1000000.0", refused by the emulator with a message about the file."""
    for name in ("data parallel", "", "a=b", "a#b"):
        with pytest.raises(ValueError, match="comm name"):
            Comm(name, 1, (0, 1))
    for nbytes in (1e6, True, 0, "1024"):
        with pytest.raises(ValueError, match="nbytes must be a positive int"):
            Call("allreduce", nbytes)  # type: ignore[arg-type]


def test_unwritable_truth_is_refused_before_the_run(emulator: Path, tmp_path: Path) -> None:
    """The truth was opened only once the whole run had been played: a path it could not take was an error at
    the end. Here the run would kill its own process at its first group, so refusing first is refusing before
    it."""
    sc = tmp_path / "sc.txt"
    sc.write_text(
        "autoccl-emu-scenario 1\ncomm name=a hash=1 ranks=0\ngroup comm=a colls=allreduce:1048576\n"
        "host rank=0 kill_after=0\n"
    )
    for truth, why in [
        (tmp_path / "missing" / "t.jsonl", "No such file or directory"),
        (tmp_path, "Is a directory"),
    ]:
        cmd = [str(emulator), "--scenario", str(sc), "--ranks", "0", "--no-plugin", "--truth", str(truth)]
        p = subprocess.run(cmd, capture_output=True, text=True)
        says = (
            f"autoccl-emu: --truth takes a file this process can create or overwrite, not '{truth}' ({why})"
        )
        assert p.returncode == 2 and says in p.stderr, (truth, p.returncode, p.stderr)
        assert "killing this process" not in p.stderr


def test_order_and_host_lines_of_no_comm_are_refused(emulator: Path, tmp_path: Path) -> None:
    """An order or host line naming a rank that is in no comm was ignored: the skew or order it asked for
    never happened, and the run exited 0."""
    group = "group comm=a colls=allreduce:1048576\n"
    for body, says in [
        (
            group + "order rank=2 policy=reverse\n",
            "scenario line 4: order rank=2 is in no comm (the comms' ranks: 0,1)",
        ),
        (
            "host rank=7 delay_us=100\n" + group,
            "scenario line 3: host rank=7 is in no comm (the comms' ranks: 0,1)",
        ),
    ]:
        p = _scenario_error(emulator, tmp_path, body)
        assert p.returncode == 2 and says in p.stderr, (body, p.stderr)
    # a line may come before the comm that holds its rank
    p = _scenario_error(
        emulator, tmp_path, "order rank=2 policy=reverse\ncomm name=b hash=2 ranks=1,2\n" + group
    )
    assert p.returncode == 0, p.stderr


def test_seed_is_plain_decimal(emulator: Path, tmp_path: Path) -> None:
    """The seed was read as a C literal: 0x10 was 16 and 010 was 8. It is a decimal integer in the range of
    64 bits, anything else refused by name."""
    for seed in ("0x10", "-1", "+5", "1x", "1e3", "18446744073709551616", "1 2"):
        p = _scenario_error(emulator, tmp_path, f"seed {seed}\n")
        says = f"scenario line 3: bad seed '{seed}': one decimal integer in [0, 18446744073709551615]"
        assert p.returncode == 2 and says in p.stderr, (seed, p.stderr)

    def durations(seed: str) -> list[int]:
        p = _scenario_error(
            emulator, tmp_path, f"seed {seed}\ngroup comm=a colls=allreduce:1048576 repeat=5\n"
        )
        assert p.returncode == 0, p.stderr
        return sorted(json.loads(line)["dur_ns"] for line in (tmp_path / "t.jsonl").read_text().splitlines())

    assert durations("010") == durations("10") != durations("8")
    assert len(durations("18446744073709551615")) == 10


def test_load_repeat_and_group_comm_are_checked_in_python() -> None:
    """An infinite or nan load, a repeat below 1 and a group on a comm the scenario lacks were left to the
    emulator, which refused them in terms of the scenario file (or, for the comm, wrote a file it refused)."""
    comm, calls = Comm("a", 1, (0, 1)), (Call("allreduce", 1 << 20),)
    for load in (math.inf, -math.inf, math.nan, -0.5):
        with pytest.raises(
            ValueError, match=f"^load must be a finite number >= 0, not {re.escape(repr(load))}$"
        ):
            Group("a", calls, load=load)
        with pytest.raises(
            ValueError, match=f"^Scenario.load must be a finite number >= 0, not {re.escape(repr(load))}$"
        ):
            Scenario([comm], [Group("a", calls)], load=load).to_text()
    for repeat in (0, -3, 2.0, True):
        with pytest.raises(
            ValueError, match=rf"^repeat must be an int in \[1, 10000000\], not {re.escape(repr(repeat))}$"
        ):
            Group("a", calls, repeat=repeat)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^group comm 'b' is no comm of the scenario \(comms: a\)$"):
        run(Scenario([comm], [Group("b", calls)]), plugin=None)
    Scenario([comm], [Group("a", calls, repeat=3, load=0.5)], load=1.0).to_text()
