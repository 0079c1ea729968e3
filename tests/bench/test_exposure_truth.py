"""The profiler's ground truth for the exposure estimate (autoccl.bench.exposure_truth), on Chrome traces
built here in the shape torch.profiler writes them, and `bench train --torch-profile` on the CPU."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autoccl.bench import exposure_truth as ET
from autoccl.bench import results as R
from autoccl.cli import main

REPO = Path(__file__).resolve().parents[2]
PID, GPU = 4242, 0
MAIN, AUTOGRAD = 1, 2  # CPU threads: the one that opens the steps, the one that launches DDP's all-reduces
COMPUTE, COMM, COMM2 = 7, 20, 24  # CUDA streams


def event(
    cat: str, name: str, pid: int, tid: int, ts: float, dur: float, args: dict[str, Any]
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


class Trace:
    """A Chrome trace in torch.profiler's shape: steps, kernels with their launches and metadata."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.corr = 0

    def step(self, n: int, ts: float, dur: float, *, gpu: bool = False) -> None:
        cat, pid = ("gpu_user_annotation", GPU) if gpu else ("user_annotation", PID)
        self.events.append(event(cat, f"ProfilerStep#{n}", pid, MAIN, ts, dur, {}))

    def kernel(
        self,
        name: str,
        ts: float,
        dur: float,
        stream: int,
        *,
        launch_at: float | None = None,
        tid: int = MAIN,
        meta: dict[str, Any] | None = None,
        param_comms: dict[str, Any] | None = None,
    ) -> None:
        """A kernel; launched at `launch_at` (a cuda_runtime event, same correlation) on thread `tid`
        unless None; `meta` in the kernel's args, `param_comms` in a record_param_comms op around the
        launch."""
        self.corr += 1
        args: dict[str, Any] = {"device": GPU, "stream": stream, "correlation": self.corr, **(meta or {})}
        self.events.append(event("kernel", name, GPU, stream, ts, dur, args))
        if launch_at is None:
            return
        launch = {"correlation": self.corr}
        self.events.append(event("cuda_runtime", "cudaLaunchKernel", PID, tid, launch_at, 2, launch))
        if param_comms is not None:
            self.events.append(event("cpu_op", "record_param_comms", PID, tid, launch_at - 3, 8, param_comms))

    def doc(self) -> dict[str, Any]:
        return {"schemaVersion": 1, "traceEvents": self.events}


AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
RS = "ncclDevKernel_ReduceScatter_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
GEMM = "sm90_xmma_gemm_bf16bf16_bf16f32"
ADAM = "void at::native::multi_tensor_apply_kernel<...>"


def meta(coll: str, nin: int, nout: int, dtype: str = "Float") -> dict[str, Any]:
    return {
        "Collective name": coll,
        "dtype": dtype,
        "In msg nelems": nin,
        "Out msg nelems": nout,
        "Group size": 2,
    }


def ddp_step(t: Trace, n: int, t0: float) -> None:
    """Forward, backward with three buckets all-reduced under it, the last bucket after the backward (the
    computation idles until it ends), then the optimizer."""
    t.step(n, t0, 1000)
    t.kernel(GEMM, t0 + 10, 290, COMPUTE, launch_at=t0 + 1)  # forward
    t.kernel(GEMM, t0 + 300, 400, COMPUTE, launch_at=t0 + 150)  # backward, 300-700
    for i, (s, nel) in enumerate([(350, 1000), (450, 2000), (550, 3000)]):
        t.kernel(AR, t0 + s, 50, COMM, launch_at=t0 + 200 + i, tid=AUTOGRAD, meta=meta("allreduce", nel, nel))
    t.kernel(AR, t0 + 700, 100, COMM, launch_at=t0 + 210, tid=AUTOGRAD, meta=meta("allreduce", 500, 500))
    t.kernel(ADAM, t0 + 805, 95, COMPUTE, launch_at=t0 + 220)  # waits for the last bucket


def test_ddp_like_step_hidden_buckets_and_an_exposed_last() -> None:
    t = Trace()
    ddp_step(t, 1, 0.0)
    ddp_step(t, 2, 1000.0)
    truth = ET.truth_of_events(t.events)
    assert truth.reason is None and truth.iterations == [1, 2] and truth.kernels_without_step == 0
    assert [p.verdict for p in truth.positions] == ["hidden", "hidden", "hidden", "exposed"]
    assert [p.bytes for p in truth.positions] == [4000, 8000, 12000, 2000]
    assert all(p.coll == "allreduce" and p.count == 2 for p in truth.positions)
    assert [p.waited_share for p in truth.positions] == [0.0, 0.0, 0.0, 1.0]
    assert [p.exposed_fraction for p in truth.positions] == [0.0, 0.0, 0.0, 1.0]
    last = truth.kernels[3]
    assert (last.iteration, last.order, last.overlap_us, last.exposed_us, last.waited) == (1, 3, 0, 100, True)
    assert last.stream == COMM and last.name == AR.split("(")[0]


def test_fsdp_like_step() -> None:
    """All-gathers prefetched under the computation except the first; reduce-scatters under the backward
    except the last, which the optimizer waits for; a partly overlapped call counts its idle time."""
    t = Trace()
    t.step(1, 0, 1000)
    ag = [(0, 50, 1000), (60, 50, 2000), (360, 40, 2000)]  # (start, dur, out nelems)
    for i, (s, d, nout) in enumerate(ag):
        t.kernel(AG, s, d, COMM, launch_at=i, meta=meta("_allgather_base", nout // 2, nout, "BFloat16"))
    t.kernel(GEMM, 55, 145, COMPUTE, launch_at=3)  # forward layer 0
    t.kernel(GEMM, 200, 150, COMPUTE, launch_at=4)  # forward layer 1
    t.kernel(GEMM, 350, 150, COMPUTE, launch_at=5)  # backward layer 1
    t.kernel(GEMM, 500, 120, COMPUTE, launch_at=6)  # backward layer 0
    t.kernel(RS, 510, 50, COMM2, launch_at=7, meta=meta("_reduce_scatter_base", 4000, 2000))
    t.kernel(RS, 600, 100, COMM2, launch_at=8, meta=meta("_reduce_scatter_base", 2000, 1000))
    t.kernel(ADAM, 705, 95, COMPUTE, launch_at=9)
    truth = ET.truth_of_events(t.events)
    assert [(p.coll, p.bytes) for p in truth.positions] == [
        ("allgather", 2000),  # the gathered output, bf16
        ("allgather", 4000),
        ("allgather", 4000),
        ("reducescatter", 16000),  # the input, fp32
        ("reducescatter", 8000),
    ]
    assert [p.verdict for p in truth.positions] == ["exposed", "hidden", "hidden", "hidden", "exposed"]
    last = truth.kernels[-1]
    assert (last.overlap_us, last.exposed_us) == (20, 80)  # the backward's last 20 us overlap it
    assert truth.positions[-1].exposed_fraction == pytest.approx(0.8)


def _chain(gap_us: float) -> ET.Truth:
    t = Trace()
    t.step(1, 0, 500)
    t.kernel(GEMM, 0, 250, COMPUTE, launch_at=1)
    t.kernel(AR, 100, 100, COMM, launch_at=2)  # ends under the GEMM: looks hidden alone
    t.kernel(AR, 205, 95, COMM, launch_at=3)  # back to back on the same stream; the computation idles at 300
    t.kernel(GEMM, 310, 90, COMPUTE, launch_at=4)
    return ET.truth_of_events(t.events, gap_us=gap_us)


def test_back_to_back_chain_waits_for_its_last_call() -> None:
    chained = _chain(ET.DEFAULT_GAP_US)
    assert [k.waited for k in chained.kernels] == [True, True]
    # its own time was covered by the GEMM: waited, yet not exposed by overlap
    assert chained.kernels[0].exposed_us == 0 and chained.kernels[0].overlap_us == 100
    assert [k.waited for k in _chain(1.0).kernels] == [False, True]  # a 5 us gap is no chain at 1 us


def test_bytes_from_record_param_comms_on_the_launching_thread() -> None:
    t = Trace()
    t.step(1, 0, 300)
    t.kernel(
        AG, 10, 50, COMM, launch_at=5, tid=AUTOGRAD, param_comms=meta("_allgather_base", 64, 128, "Half")
    )
    # another thread's record_param_comms at the same time is not this launch's
    t.events.append(event("cpu_op", "record_param_comms", PID, MAIN, 1, 20, meta("allreduce", 9, 9)))
    t.kernel(AR, 100, 50, COMM, launch_at=20)  # no metadata anywhere: bytes unknown
    t.kernel(
        "ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)",
        200,
        10,
        COMM,
        launch_at=30,
        param_comms=meta("reduce_scatter_tensor_coalesced", 512, 256, "BFloat16"),
    )
    truth = ET.truth_of_events(t.events)
    assert [(k.coll, k.bytes) for k in truth.kernels] == [
        ("allgather", 256),
        ("allreduce", None),
        ("reducescatter", 1024),  # the kernel's name says no collective: PyTorch's metadata does
    ]


def test_kernels_without_a_launch_go_by_gpu_step_spans() -> None:
    t = Trace()
    t.step(3, 0, 100)
    t.step(3, 10, 200, gpu=True)
    t.step(4, 210, 200, gpu=True)
    t.kernel(AR, 20, 10, COMM, launch_at=5)
    t.kernel(AR, 250, 10, COMM)  # launched before the recorded steps (no launch event): by its GPU time
    t.kernel(AR, 900, 10, COMM)  # in no step at all: left out, counted
    truth = ET.truth_of_events(t.events)
    assert [(k.iteration, k.order) for k in truth.kernels] == [(3, 0), (4, 0)]
    assert truth.kernels_without_step == 1


@pytest.mark.parametrize(
    ("name", "coll"),
    [
        (AR, "allreduce"),
        ("ncclKernel_AllGather_RING_LL_Sum_int8_t", "allgather"),
        (RS, "reducescatter"),
        ("ncclDevKernel_Broadcast_RING_LL(ncclDevKernelArgsStorage<4096ul>)", "broadcast"),
        ("ncclDevKernel_Reduce_Sum_f32_RING_LL", "reduce"),
        ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", "sendrecv"),
        ("ncclDevKernel_Generic(ncclDevKernelArgsStorage<4096ul>)", None),
        (GEMM, None),
    ],
)
def test_nccl_kernel_names(name: str, coll: str | None) -> None:
    assert ET.nccl_coll(name) == coll


def test_collective_names_and_dtypes() -> None:
    assert [
        ET.comms_coll(n)
        for n in (
            "_allgather_base",
            "reduce_scatter_tensor_coalesced",
            "allreduce",
            "broadcast",
            "reduce",
            "send",
        )
    ] == ["allgather", "reducescatter", "allreduce", "broadcast", "reduce", "sendrecv"]
    sizes = {"Float": 4, "BFloat16": 2, "Half": 2, "Double": 8, "Long": 8, "Byte": 1, "Float8_e4m3fn": 1}
    sizes |= {"float32": 4, "bfloat16": 2, "torch.float16": 2, "int64": 8}  # torch's names
    assert {d: ET.dtype_bytes(d) for d in sizes} == sizes
    assert ET.dtype_bytes("Mystery") is None
    assert ET.tuner_bytes("broadcast", meta("broadcast", 10, 10, "Double")) == 80


def _truth(seq: list[tuple[str, int | None, bool]]) -> ET.Truth:
    positions = [
        ET.PositionTruth(i, coll, nbytes, 3, 1.0 if waited else 0.0, 0.0)
        for i, (coll, nbytes, waited) in enumerate(seq)
    ]
    return ET.Truth([], positions, [1, 2, 3])


def _record(positions: list[tuple[str, int, str]]) -> dict[str, Any]:
    return {
        "ev": "exposure",
        "comm": "0xabc",
        "rank": 0,
        "positions": [
            {
                "pos": i,
                "coll": c,
                "bytes": b,
                "pipe": 1,
                "mean_us": 10.0,
                "slope": 1.0 if v == "exposed" else 0.0,
                "se": 0.05,
                "alias": -1,
                "tail": 0.1,
                "verdict": v,
            }
            for i, (c, b, v) in enumerate(positions)
        ],
    }


def test_compare_aligns_the_estimators_iteration_as_a_rotation() -> None:
    truth = _truth(
        [
            ("allreduce", 100, False),
            ("allreduce", 200, False),
            ("allgather", 300, True),
            ("reducescatter", 400, True),
        ]
    )
    # the estimator's iteration starts at the all-gather
    rec = _record(
        [
            ("allgather", 300, "exposed"),
            ("reducescatter", 400, "hidden"),
            ("allreduce", 100, "unknown"),
            ("allreduce", 200, "hidden"),
        ]
    )
    c = ET.compare(truth, rec)
    assert c.rotation == 2 and c.ambiguous == [] and c.notes == []
    assert [r.truth_pos for r in c.rows] == [2, 3, 0, 1]
    assert [r.agree for r in c.rows] == [True, False, None, True]
    assert c.counts == {"right": 2, "wrong": 1, "unknown": 1, "unmatched": 0}
    md = c.markdown()
    assert "2 right, 1 wrong, 1 unknown of 4 positions" in md and "| 1 | reducescatter | 400 | hidden |" in md
    assert "**no**" in md and json.loads(json.dumps(c.to_json()))["counts"]["wrong"] == 1


def test_compare_reports_ambiguous_rotations_and_missing_bytes() -> None:
    truth = _truth([("allgather", None, True), ("allgather", None, False)])
    c = ET.compare(truth, _record([("allgather", 64, "exposed"), ("allgather", 64, "hidden")]))
    assert c.rotation == 0 and c.ambiguous == [1]
    assert any("ambiguous alignment: rotations 0, 1" in n for n in c.notes)
    assert any("no bytes" in n for n in c.notes)
    assert [r.agree for r in c.rows] == [True, True]


def test_compare_says_when_nothing_matches_or_periods_differ() -> None:
    truth = _truth([("allreduce", 8, True)])
    c = ET.compare(truth, _record([("allgather", 8, "exposed"), ("allgather", 16, "hidden")]))
    assert any("no call of the estimator's iteration" in n for n in c.notes)
    assert any("period differs" in n for n in c.notes)
    assert [r.agree for r in c.rows] == [None, None] and c.counts["unmatched"] == 2
    none = ET.compare(ET.Truth.none("no kernels", 20.0), _record([("allgather", 8, "exposed")]))
    assert none.rotation is None and none.notes == ["no truth: no kernels"]


def test_compare_judges_the_record_per_task_on_the_positions_it_holds() -> None:
    # truth: the first task's two all-gathers exposed (one of them in a third of the steps), the
    # reduce-scatter task's two hidden; the estimator's iteration starts at the second truth position
    truth = _truth([("allgather", 64, True), ("allgather", 64, True), ("reducescatter", 32, False)])
    truth.positions.append(ET.PositionTruth(3, "reducescatter", 32, 3, 0.0, 0.0))
    truth.positions[1].waited_share = 0.34
    rec = _record(
        [
            ("allgather", 64, "unknown"),
            ("reducescatter", 32, "unknown"),
            ("reducescatter", 32, "unknown"),
            ("allgather", 64, "unknown"),
        ]
    )
    rec["tasks"] = [
        {"coll": "allgather", "bytes": 64, "pipe": 1, "calls": 2, "sum_us": 20.0, "slope": 0.81, "se": 0.06,
         "alias": -1, "verdict": "exposed", "positions": [0, 3]},
        {"coll": "reducescatter", "bytes": 32, "pipe": 1, "calls": 2, "sum_us": 20.0, "slope": 0.7, "se": 0.1,
         "alias": -1, "verdict": "exposed", "positions": [1, 2]},
    ]  # fmt: skip
    c = ET.compare(truth, rec)
    assert c.rotation == 1 and c.counts["unknown"] == 4
    ag, rs = c.tasks
    assert ag.truth_verdict == "exposed" and ag.exposed_positions == 1 and ag.agree is True
    assert ag.waited_share == pytest.approx((0.34 + 1.0) / 2)
    assert rs.truth_verdict == "hidden" and rs.exposed_positions == 0 and rs.agree is False
    assert c.task_counts == {"right": 1, "wrong": 1, "unknown": 0}
    md = c.markdown()
    assert "1 right, 1 wrong, 0 unknown of 2 tasks" in md
    assert "| allgather | 64 | 2 | exposed | 0.81 ± 0.06 |" in md
    assert json.loads(json.dumps(c.to_json()))["task_counts"]["wrong"] == 1
    # a record whose task slope left the bound: no verdicts, and the comparison says why
    assert any("outside 0-1" in n for n in ET.compare(truth, dict(rec, out_of_bounds=True)).notes)
    assert not any("outside 0-1" in n for n in c.notes)
    # no truth: the task rows stay, judged by nothing
    none = ET.compare(ET.Truth.none("no kernels", 20.0), rec)
    assert [t.truth_verdict for t in none.tasks] == [None, None] and none.task_counts["right"] == 0
    # damaged entries are left out or read as nothing, not a crash
    rec["tasks"] = [
        "junk",
        {
            "coll": "allgather",
            "calls": None,
            "slope": True,
            "verdict": "exposed",
            "positions": [True, 0, "1", 9],
        },
        {"coll": "reducescatter", "positions": 3},
    ]
    c = ET.compare(truth, rec)
    ag, rs = c.tasks
    # only position 0 is read: the truth's all-gather waited for in a third of the steps, hidden
    assert ag.calls == 1 and ag.slope is None and ag.matched_positions == 1 and ag.agree is False
    assert rs.matched_positions == 0 and rs.truth_verdict is None and rs.agree is None
    assert "exposed of matched positions" in c.markdown()
    # a record of a plugin without the per-task regression: no task table
    del rec["tasks"]
    assert ET.compare(truth, rec).tasks == [] and "tasks." not in ET.compare(truth, rec).markdown()


def test_gz_and_plain_files_give_the_same_truth(tmp_path: Path) -> None:
    t = Trace()
    ddp_step(t, 1, 0.0)
    plain, packed = tmp_path / "p.json", tmp_path / "p.pt.trace.json"  # gzip'd whatever its name says
    plain.write_text(json.dumps(t.doc()))
    with gzip.open(packed, "wt") as f:
        json.dump(t.doc(), f)
    a, b = ET.truth_of_file(plain), ET.truth_of_file(packed)
    assert a.to_json() == b.to_json() and len(a.positions) == 4
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ET.TruthError, match="not a readable Chrome trace"):
        ET.truth_of_file(bad)


def test_summary_round_trips_and_keeps_at_most_n_iterations() -> None:
    t = Trace()
    for n in range(1, 4):
        ddp_step(t, n, 1000.0 * (n - 1))
    truth = ET.truth_of_events(t.events)
    summary = truth.to_json(max_iterations=2)
    assert {k["iteration"] for k in summary["kernels"]} == {1, 2} and len(summary["positions"]) == 4
    back = ET.Truth.from_json(json.loads(json.dumps(summary)))
    assert [p.verdict for p in back.positions] == [p.verdict for p in truth.positions]
    assert back.kernels[0].waited is False and back.iterations == [1, 2, 3]


def test_a_cpu_profile_has_no_truth_and_says_why() -> None:
    events = [
        event("user_annotation", "ProfilerStep#1", PID, MAIN, 0, 9, {}),
        event("cpu_op", "c10d::allreduce_", PID, MAIN, 1, 2, {}),
    ]
    truth = ET.truth_of_events(events)
    assert truth.reason is not None and "no GPU kernels" in truth.reason
    assert truth.to_json()["positions"] == [] and truth.to_json()["reason"] == truth.reason
    t = Trace()
    t.kernel(GEMM, 0, 10, COMPUTE, launch_at=0)
    assert "no NCCL kernel" in (ET.truth_of_events(t.events).reason or "")
    t.kernel(AR, 20, 10, COMM, launch_at=1)
    assert "no ProfilerStep#" in (ET.truth_of_events(t.events).reason or "")


def test_launch_report_uses_each_ranks_own_profile(tmp_path: Path) -> None:
    t = Trace()
    ddp_step(t, 1, 0.0)
    rank0 = ET.truth_of_events(t.events).to_json()
    flipped = Trace()  # rank 1: its last bucket is hidden too (the optimizer starts before it ends)
    ddp_step(flipped, 1, 0.0)
    flipped.kernel(GEMM, 650, 200, COMPUTE, launch_at=100)
    with gzip.open(tmp_path / ET.profile_name("ddp/online", 1), "wt") as f:
        json.dump(flipped.doc(), f)
    recs = [
        _record([("allreduce", 2000, "exposed")]),
        {**_record([("allreduce", 2000, "exposed")]), "rank": 1},
        {**_record([("allreduce", 2000, "exposed")]), "rank": 2},
    ]
    text, comps = ET.launch_report(tmp_path, "ddp/online", rank0, recs)
    assert [c.rows[0].agree for c in comps] == [True, False, True]
    assert [c.rotation for c in comps] == [3, 3, 3]
    assert "the profile of rank 2 is not on this host" in comps[2].notes[0]
    assert text.startswith("# exposure estimate against the profiler's truth: ddp/online")
    assert ET.profile_name("ddp/online", 1) == "profile-ddp_online-rank1.json.gz"


def test_runner_writes_exposure_truth_md_and_the_summary_names_it(tmp_path: Path) -> None:
    from autoccl.bench.runner import _exposure_truth_report

    t = Trace()
    ddp_step(t, 1, 0.0)
    entry: dict[str, Any] = {"label": "ddp/online", "exposure_truth": ET.truth_of_events(t.events).to_json()}
    _exposure_truth_report(entry, tmp_path, "ddp/online", [{"ev": "task"}])  # no exposure record: nothing
    assert "exposure_truth_md" not in entry and not (tmp_path / "exposure-truth.md").exists()
    _exposure_truth_report(entry, tmp_path, "ddp/online", [_record([("allreduce", 2000, "exposed")])])
    assert (tmp_path / "exposure-truth.md").read_text().count("| 0 | allreduce | 2000 | exposed |") == 1
    cpu = {
        "label": "fsdp2/nccl",
        "exposure_truth": ET.Truth.none("the profile holds no GPU kernels", 20).to_json(),
    }
    lines = "\n".join(R.exposure_truth_markdown({"launches": [entry, cpu]}))
    assert "| ddp/online | 1 | 4 | 1 / 3 | 1 right, 0 wrong, 0 unknown" in lines
    assert "exposure-truth.md" in lines and "no truth: the profile holds no GPU kernels" in lines
    assert "tasks" not in lines  # a record without the per-task fit: no task counts
    # with it: the task counts beside the positions'
    rec = _record([("allreduce", 2000, "exposed")])
    task = {"coll": "allreduce", "bytes": 2000, "calls": 1, "slope": 1.0, "se": 0.01, "verdict": "exposed"}
    rec["tasks"] = [task | {"positions": [0]}]
    _exposure_truth_report(entry, tmp_path, "ddp/online", [rec])
    lines = "\n".join(R.exposure_truth_markdown({"launches": [entry]}))
    assert "1 right, 0 wrong, 0 unknown; tasks 1 right, 0 wrong, 0 unknown of 1" in lines


# ------------------------------------------------------------------------------------ bench train


def test_profile_window_records_the_n_iterations_before_the_last(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    from autoccl.bench.train import ProfileWindow

    w = ProfileWindow(2, 6, torch.device("cpu"))
    assert w.iterations == [2, 5]
    host_work = []
    for i in range(6):
        started = w.before(i)
        torch.ones(8) @ torch.ones(8)
        host_work.append((started, w.after(i)))
    assert host_work == [(False, False)] * 2 + [(True, False), (False, False), (False, True), (False, False)]
    w.export(tmp_path / "p.json.gz")
    steps = {e["name"] for e in ET.load_trace(tmp_path / "p.json.gz") if "ProfilerStep" in e.get("name", "")}
    assert steps == {"ProfilerStep#1", "ProfilerStep#2"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--torch-profile", "-1"], "--torch-profile -1: N must be 0 (off) or 1..iterations - 2 (at most 8"),
        (["--torch-profile", "9"], "--torch-profile 9: N must be"),
        (["-n", "2", "--torch-profile", "1"], "(0 with -n 2)"),
        (["--torch-profile", "2", "--data", "markov"], "--torch-profile profiles the plain training loop"),
        (["--torch-profile", "2", "--resilience", "on"], "--torch-profile profiles the plain training loop"),
    ],
)
def test_bench_train_refuses_bad_torch_profile(args: list[str], message: str) -> None:
    base = ["bench", "train", "--device", "cpu", "--preset", "tiny", "--parallel", "ddp", "-n", "10"]
    r = CliRunner().invoke(main, [*base, *args])
    assert r.exit_code != 0 and message in r.output, r.output


def test_bench_train_torch_profile_on_the_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    pp = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "python"), *([pp] if pp else [])]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("WORLD_SIZE", "RANK", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    prefix = tmp_path / "t"
    args = "bench train --device cpu --backend gloo --nproc 2 --no-progress --preset tiny --parallel ddp "
    args += "--modes nccl --dtype fp32 --seq 16 --batch 2 -n 5 --torch-profile 2"
    r = CliRunner().invoke(main, [*args.split(), "-o", str(prefix)], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    assert doc["settings"]["torch_profile"] == 2 and len(doc["iterations"][0]["iter_ms"]) == 5
    (launch,) = doc["launches"]
    truth = launch["exposure_truth"]
    assert "no GPU kernels" in truth["reason"] and truth["positions"] == []
    assert truth["profiled_iters"] == [1, 4]
    folder = Path(launch["workdir"])
    assert {p.name for p in folder.glob("profile-*")} == {f"profile-ddp_nccl-rank{r}.json.gz" for r in (0, 1)}
    assert Path(truth["profile"]) == folder / "profile-ddp_nccl-rank0.json.gz"
    assert "## exposure ground truth (--torch-profile)" in prefix.with_suffix(".md").read_text()
