"""Plans executed over gloo point-to-point operations by 4-8 processes: every collective x dtype x ragged
size from synthesized plans on a ring, a mesh, a torus and a two-level hosts x GPUs cluster equals the
reference (bit-identical for gathers and broadcasts)."""

from __future__ import annotations

from pathlib import Path

import adaptive_workers as W
import pytest
import torch

from autoccl.adaptive.jobs import check_job, generated_doc
from autoccl.adaptive.launch import WorkerError, run_local

ALL = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]


def _check(spec: str, nproc: int, **cfg: object) -> list[dict]:
    base = {
        "device": "cpu",
        "topology": generated_doc(spec),
        "colls": ALL,
        "dtypes": None,
        "ops": ["sum"],
        "sizes": [5, 37],
        "chunks": 2,
        "bytes": 1 << 20,
    }
    return run_local(check_job, nproc, {**base, **cfg})


@pytest.mark.parametrize(
    "spec,nproc", [("ring:4", 4), ("mesh:2x3", 6), ("torus:2x4", 8), ("cluster:2x2", 4)], ids=lambda x: str(x)
)
def test_every_collective_and_dtype(S, spec: str, nproc: int) -> None:
    results = _check(spec, nproc)
    assert all(r["cases"] >= 17 * 2 * 5 for r in results)  # 17 dtypes x 2 sizes x >= 5 checks
    failures = [f for r in results for f in r["failures"]]
    assert not failures, failures[:10]


def test_every_reduction_on_every_dtype(S) -> None:
    results = _check("ring:4", 4, colls=["allreduce", "reduce"], ops=None, both_kinds=True, cycle_sizes=True)
    assert results[0]["cases"] > 200
    failures = [f for r in results for f in r["failures"]]
    assert not failures, failures[:10]


def test_nccl_style_batches(S) -> None:
    """One handle per batch (as NCCL's coalesced point-to-point returns) must be enough."""
    fails = run_local(W.coalesced_job, 4, "mesh:2x2")
    assert not [f for r in fails for f in r]


def test_baselines_through_schedule_files(S, tmp_path: Path) -> None:
    fails = run_local(W.baselines_job, 4, "torus:2x2", str(tmp_path))
    assert not [f for r in fails for f in r]
    assert len(list(tmp_path.glob("*.json"))) >= 15


def test_rank_count_mismatch_is_one_sentence(S) -> None:
    with pytest.raises(WorkerError, match="the plan is for 6 ranks but the process group has 4"):
        _check("mesh:2x3", 4, colls=["allreduce"], dtypes=["float32"])


def test_root_is_a_global_rank_as_in_torch(S) -> None:
    results = run_local(W.rooted_subgroup_job, 3, timeout_s=30)
    for r in results[1:]:
        assert {k: v for k, v in r.items() if k != "wrong src"} == {
            "broadcast src": True,
            "broadcast group_src": True,
            "reduce dst": True,
            "reduce group_dst": True,
        }
        assert r["wrong src"] == (
            "the plan's broadcast root is group rank 1, not src=1 (group rank 0): synthesize one with root=0"
        )


def test_a_rank_outside_the_group_is_told_so(S) -> None:
    results = run_local(W.non_member_job, 3, timeout_s=30)
    assert results[:2] == ["[2.0, 2.0, 2.0, 2.0]"] * 2
    assert results[2] == (
        "rank 2 is not a member of the process group: call the collective on the group's ranks only"
    )


def test_non_contiguous_tensors_as_in_torch(S) -> None:
    for r in run_local(W.non_contiguous_job, 2, timeout_s=30):
        assert r == dict.fromkeys(r, True) and len(r) == 7, r


def test_a_plan_for_another_collective_says_how_to_make_the_right_one(S) -> None:
    from autoccl.adaptive import collectives as C
    from autoccl.adaptive.plan import Plan, PlanError

    t = S.parse_gen_spec("ring:2")
    plan = Plan.from_schedule(S.synthesize(t, "allgather", "1M")[0], t)

    class TwoRanks:
        rank, size = 0, 2

    with pytest.raises(
        PlanError, match=r"^the plan is for allgather, not allreduce: make one with `autoccl synth"
    ):
        C.all_reduce(torch.ones(4), plan, transport=TwoRanks())
