"""The emulator's computation (Group.compute_us, wait, step_end): a compute stream per rank beside its
communicators' kernels, slowing each other while they overlap, and training steps shaped like DDP and FSDP.

The step times are checked against a reference written here from the model's formulas and the configurations
the emulator applied (its call records), so the C++ schedule cannot drift from what docs/emulator.md says."""

from __future__ import annotations

import statistics
import subprocess
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean
from test_online import online_env

from autoccl.emu import Call, Comm, Group, Scenario, run
from autoccl.emu.model import PerfModel
from autoccl.emu.runner import DEFAULT_MODEL
from autoccl.emu.scenario import ddp_like, fsdp_like


class ComputeRun:
    """The fluid of docs/emulator.md ("computation"), as the emulator's emu::ComputeRun."""

    def __init__(self, at: float, left: float) -> None:
        self.at, self.left = at, left

    def kernel(self, start: float, alone: float, comm_slow: float, compute_slow: float) -> float:
        t, rest = start, alone
        if self.left > 0 and self.at < t:
            done = min(self.left, t - self.at)
            self.left -= done
            self.at += done
        if self.left <= 0:
            return t + rest
        if self.at > t:
            if rest <= self.at - t:
                return t + rest
            rest -= self.at - t
            t = self.at
        kernel_both, compute_both = rest * comm_slow, self.left * compute_slow
        if kernel_both <= compute_both:
            self.left -= kernel_both / compute_slow
            self.at = t + kernel_both
            return self.at
        rest -= compute_both / comm_slow
        self.at = t + compute_both
        self.left = 0.0
        return self.at + rest

    def end(self) -> float:
        return self.at + self.left


def reference_step_ends(
    sc: Scenario, calls: list[dict[str, Any]], grank: int, model_path: Path | str = DEFAULT_MODEL
) -> list[int]:
    """Step ends (ns of the rank's clock) of a noiseless one-communicator scenario of single-call groups, from
    the configurations the emulator applied."""
    model = PerfModel.load_file(model_path)
    by_pos: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for c in calls:
        if int(c["grank"]) == grank:
            by_pos[int(c["group"])].append(c)
    stream, compute, ends = 0, 0.0, []
    for pos, g in enumerate(sc.groups):
        assert g.repeat == 1
        load = sc.load if g.load is None else g.load
        overlap = g.compute_us > 0 and g.wait != "self"
        input_ready = int(compute)
        run_ = ComputeRun(compute, g.compute_us * 1000.0)
        if g.wait == "prev":
            run_.at = max(run_.at, float(stream))
        for rec in sorted(by_pos[pos], key=lambda r: int(r["batch"])):
            args = (rec["coll"], int(rec["nranks"]), int(rec["task_bytes"]), rec["algo"], rec["proto"])
            used, chunk = int(rec["used_channels"]), int(rec["chunk"])
            mean = model.mean_us(*args, used, chunk, load)
            alone = model.mean_us(*args, used, chunk, 0.0) if overlap else mean
            dur = max(1000, int(alone * 1000.0))
            start = max(stream, input_ready) + sc.gap_ns
            if overlap:
                slow = model.gemm_slowdown(used, load, rec["proto"])
                end = run_.kernel(float(start), float(dur), mean / alone, slow)
                stream = max(int(end), start + 1000)
            else:
                stream = start + dur
        if g.compute_us > 0 or g.wait != "none" or g.step_end:
            if g.wait == "self":
                run_.at = max(run_.at, float(stream))
            compute = max(compute, run_.end())
        if g.step_end:
            ends.append(stream)
    return ends


def _plain(sc: Scenario, **kw: Any) -> Any:
    res = run(sc, plugin=None, timeout=120, **kw)
    assert_clean(res)
    return res


@pytest.mark.parametrize("shape", ["ddp", "fsdp"])
@pytest.mark.parametrize("load", [0.0, 1.0])
def test_step_times_follow_the_model(emulator: Path, shape: str, load: float) -> None:
    sc = (ddp_like if shape == "ddp" else fsdp_like)(steps=6, load=load, noise=False)
    res = _plain(sc)
    for grank in (0, 1):
        got = sorted(int(r["end_ns"]) for r in res.steps if int(r["grank"]) == grank)
        want = reference_step_ends(sc, res.calls, grank)
        assert len(got) == 6
        assert got == pytest.approx(want, abs=2), (got, want)
    # every rank computes alike: one step clock for the job
    assert res.step_ms(0) == pytest.approx(res.step_ms(1))


def test_protocol_weights_follow_the_model(emulator: Path, tmp_path: Path) -> None:
    """A model whose protocols load the computation unequally (load.gemm_proto_<name>): the emulator's steps
    are the Python model's, and hidden LL (1 MiB buckets, NCCL's choice there) costs the step more than
    with every protocol weighing 1."""
    sc = ddp_like(steps=6, load=1.0, bucket_bytes=(1 << 20, 25 << 20, 1 << 20, 6 << 20), noise=False)
    ends = {}
    for name, ll in (("alike", 1.0), ("heavy_ll", 4.0)):
        m = PerfModel.load_file(DEFAULT_MODEL)
        m.load.update({"gemm_proto_ll": ll, "gemm_proto_ll128": 1.0, "gemm_proto_simple": 0.5})
        path = tmp_path / f"{name}.json"
        m.save(path)
        res = _plain(sc, model=path)
        assert {r["proto"] for r in res.calls} >= {"ll", "simple"}
        for grank in (0, 1):
            got = sorted(int(r["end_ns"]) for r in res.steps if int(r["grank"]) == grank)
            assert got == pytest.approx(reference_step_ends(sc, res.calls, grank, path), abs=2)
        ends[name] = res.step_ms(0)[-1]
    assert ends["heavy_ll"] > ends["alike"], ends


def test_hidden_collective_costs_only_what_it_slows(emulator: Path) -> None:
    """Without contention a hidden all_reduce is free: the step is the computation plus the exposed call.
    With contention it slows the computation it overlaps, and more channels slow it more."""
    bucket, chunk_us = 25 << 20, 2000.0
    steps = 4

    def step_ms(load: float, channels: int) -> float:
        groups = []
        for _ in range(steps):
            groups.append(Group("dp", (Call("allreduce", bucket),), load=load, compute_us=chunk_us))
            groups.append(Group("dp", (Call("allreduce", 1 << 20),), load=load, wait="self", step_end=True))
        sc = Scenario([Comm("dp", 0xC0, (0, 1), channels=channels)], groups, noise=False)
        times = _plain(sc).step_ms(0)
        assert len(times) == steps - 1
        assert max(times) == pytest.approx(min(times), rel=1e-6)
        return times[0]

    # the 25 MiB all_reduce takes nothing: the computation, then the 1 MiB one (< 100 us)
    free = step_ms(0.0, 24)
    for channels in (8, 24, 64):
        assert chunk_us / 1e3 < step_ms(0.0, channels) < chunk_us / 1e3 + 0.1
    loaded_24, loaded_64 = step_ms(1.0, 24), step_ms(1.0, 64)
    assert loaded_24 > 1.01 * free
    assert loaded_64 > loaded_24


def test_waits_order_computation_after_collectives(emulator: Path) -> None:
    """wait=prev: the computation starts when the collectives before its group end (FSDP's layer waits for
    its parameters); wait=none: it runs beside them."""

    def first_step_end(wait: str) -> int:
        groups = [
            Group("c", (Call("allgather", 256 << 20),)),
            Group("c", (Call("allgather", 1 << 20),), compute_us=300.0, wait=wait),
            Group("c", (Call("allgather", 1 << 20),), wait="self", step_end=True),
        ]
        res = _plain(Scenario([Comm("c", 0xC1, (0, 1))], groups, noise=False))
        (end,) = [int(r["end_ns"]) for r in res.steps if int(r["grank"]) == 0]
        big = [int(r["dur_ns"]) for r in res.calls if int(r["grank"]) == 0 and int(r["bytes"]) == 256 << 20]
        assert big[0] > 300_000  # the first all_gather outlasts the computation
        return end - big[0]

    assert first_step_end("prev") > 300_000 > first_step_end("none")


@pytest.mark.parametrize("shape", ["ddp", "fsdp"])
def test_online_never_loses_the_step(plugin: Path, shape: str) -> None:
    """As `autoccl run` starts a job (communicators raised to 64 channels, NCCL's own choices kept at the
    plain count), online tuning under a heavy computation is not slower per step than NCCL: hidden
    collectives the search would give 64 channels slow the computation, and the step guard sees it."""
    sc = (ddp_like if shape == "ddp" else fsdp_like)(steps=300 if shape == "ddp" else 160, load=1.0)
    plain = statistics.median(_plain(sc).step_ms(0)[-60:])
    env = online_env(False, NCCL_MIN_CTAS="64", AUTOCCL_NCCL_CHANNELS="24")
    res = run(sc, plugin=plugin, env=env, timeout=300)
    assert_clean(res)
    tuned = statistics.median(res.step_ms(0)[-60:])
    assert tuned <= plain * 1.003, (tuned, plain)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("group comm=c colls=allreduce:1024 compute=-1", "bad compute"),
        ("group comm=c colls=allreduce:1024 wait=later", "wait must be none|prev|self"),
        ("group comm=c colls=allreduce:1024 step=2", "bad step"),
        ("group comm=c colls=allreduce:1024 graph=1 compute=5", "graph group cannot carry"),
    ],
)
def test_bad_computation_rejected(emulator: Path, tmp_path: Path, line: str, message: str) -> None:
    text = "autoccl-emu-scenario 1\ncomm name=c hash=0x1 ranks=0,1\n" + line + "\n"
    path = tmp_path / "s.txt"
    path.write_text(text)
    p = subprocess.run(
        [str(emulator), "--scenario", str(path), "--ranks", "0"], capture_output=True, text=True
    )
    assert p.returncode != 0 and message in p.stderr, p.stderr


def test_python_rejects_computation_on_graphs() -> None:
    with pytest.raises(ValueError, match="graph group cannot carry"):
        Group("c", (Call("allreduce", 1024),), graph=True, compute_us=5.0)
    with pytest.raises(ValueError, match="wait must be"):
        Group("c", (Call("allreduce", 1024),), wait="later")
