"""Properties of `autoccl sim` (hypothesis, bounded examples): it resolves schedules by name, so the order in
which a topology file lists its NPUs and links changes nothing; and every mutation of a valid schedule (drop,
duplicate, reorder, re-route, speed up or slow down a transfer) makes it fail with a non-zero exit."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

COLLS = ["allgather", "reducescatter", "allreduce", "broadcast", "reduce"]
# Topologies where data is forwarded (so a transfer can depend on an earlier one), of several kinds.
GENERATORS: dict[str, dict[str, Any]] = {
    "mesh_2x3": {"kind": "mesh", "dims": [2, 3]},
    "torus_3x3": {"kind": "torus", "dims": [3, 3], "dim_bandwidth_gbps": [50, 25]},
    "ring_5": {"kind": "ring", "dims": [5], "latency_us": 1.5},
    "cluster_2x2": {"kind": "cluster", "dims": [2, 2], "nic_bandwidth_gbps": 25},
    "dragonfly_3x2": {"kind": "dragonfly", "dims": [3, 2], "global_bandwidth_gbps": 20},
    "uni_ring_4": {"kind": "uni_ring", "dims": [4]},
}
PROPS = settings(
    max_examples=25,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def _explicit(S: Any, gen: dict[str, Any]) -> dict[str, Any]:
    """The generated topology as an explicit file (nodes and links listed)."""
    t = S.topology_from_dict({"generator": gen})
    return {
        "name": "t",
        "nodes": [{"name": n, "kind": k} for n, k in t.nodes],
        "links": [[a, b, lat, bw] for a, b, lat, bw in t.links],
    }


def _shuffled(doc: dict[str, Any], seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    nodes, links = list(doc["nodes"]), list(doc["links"])
    rng.shuffle(nodes)
    rng.shuffle(links)
    return {**doc, "nodes": nodes, "links": links}


def _sim(tmp: Path, topo_doc: dict[str, Any], sched: dict[str, Any], name: str) -> Any:
    from autoccl.cli import main

    (tmp / f"{name}.yaml").write_text(yaml.safe_dump(topo_doc))
    (tmp / f"{name}.json").write_text(json.dumps(sched))
    rep = tmp / f"{name}.report.json"
    res = CliRunner().invoke(
        main,
        [
            "sim",
            "-t",
            str(tmp / f"{name}.yaml"),
            "--schedule",
            str(tmp / f"{name}.json"),
            "--report",
            str(rep),
        ],
    )
    return res, (json.loads(rep.read_text()) if rep.exists() else None)


def _schedule(S: Any, tmp: Path, doc: dict[str, Any], coll: str, chunks: int) -> dict[str, Any]:
    t = S.topology_from_dict(doc)
    s, _ = S.synthesize(t, coll, "3M", chunks=chunks, seeds=2, root=1)
    path = tmp / "orig.json"
    S.save_schedule(s, path, t)
    return dict(json.loads(path.read_text()))


@PROPS
@given(
    gen=st.sampled_from(sorted(GENERATORS)),
    coll=st.sampled_from(COLLS),
    chunks=st.integers(1, 2),
    order=st.integers(0, 2**16),
)
def test_declaration_order_changes_nothing(
    S: Any, tmp_path: Path, gen: str, coll: str, chunks: int, order: int
) -> None:
    doc = _explicit(S, GENERATORS[gen])
    sched = _schedule(S, tmp_path, doc, coll, chunks)
    a, rep_a = _sim(tmp_path, doc, sched, "a")
    b, rep_b = _sim(tmp_path, _shuffled(doc, order), sched, "b")
    assert a.exit_code == 0 and "check ok" in a.output, a.output
    assert b.exit_code == 0 and "check ok" in b.output, b.output
    assert rep_a["results"][0]["time_us"] == rep_b["results"][0]["time_us"]
    assert rep_a["results"][0]["time_us"] == pytest.approx(sched["time_us"], rel=1e-12)


def _dependent_pairs(tr: list[list[float]]) -> list[tuple[int, int]]:
    """(a, b): transfer a brings chunk c into rank r, transfer b later sends c from r."""
    into: dict[tuple[int, int], list[int]] = {}
    for i, x in enumerate(tr):
        into.setdefault((int(x[0]), int(x[2])), []).append(i)
    pairs = []
    for j, y in enumerate(tr):
        for i in into.get((int(y[0]), int(y[1])), []):
            if tr[i][4] <= y[3]:
                pairs.append((i, j))
    return pairs


MUTATIONS = ["drop", "duplicate", "reorder", "reroute", "speedup", "slowdown"]


@pytest.mark.parametrize("mutation", MUTATIONS)
@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(
    gen=st.sampled_from(sorted(GENERATORS)),
    coll=st.sampled_from(COLLS),
    pick=st.integers(0, 2**16),
)
def test_every_mutation_is_caught(
    S: Any, tmp_path: Path, gen: str, coll: str, mutation: str, pick: int
) -> None:
    doc = _explicit(S, GENERATORS[gen])
    sched = _schedule(S, tmp_path, doc, coll, 1)
    tr = [list(x) for x in sched["transfers"]]
    i = pick % len(tr)
    if mutation == "drop":
        del tr[i]
    elif mutation == "duplicate":
        tr.insert(i, list(tr[i]))
    elif mutation == "reorder":  # a transfer moved to start before the one that brought it its data ends
        pairs = _dependent_pairs(tr)
        assume(pairs)
        a, b = pairs[pick % len(pairs)]
        dur = tr[b][4] - tr[b][3]
        tr[b][3] = max(0.0, tr[a][4] - dur / 2 - 1e-3)
        tr[b][4] = tr[b][3] + dur
        assume(tr[b][3] < tr[a][4])
    elif mutation == "reroute":  # a route that leads elsewhere
        own = tr[i][6]
        ends = {r: (x[1], x[2]) for x in tr for r in [x[6]]}
        other = [r for r, e in ends.items() if e != (tr[i][1], tr[i][2]) and r != own]
        assume(other)
        tr[i][6] = other[pick % len(other)]
    elif mutation == "speedup":
        tr[i][4] = tr[i][3] + 0.9 * (tr[i][4] - tr[i][3])
    elif mutation == "slowdown":
        tr[i][4] = tr[i][3] + 1.1 * (tr[i][4] - tr[i][3])
    mutated = {**sched, "transfers": tr}
    res, _ = _sim(tmp_path, _shuffled(doc, pick), mutated, "m")
    assert res.exit_code != 0, (mutation, res.output)
    assert "Traceback" not in res.output


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["links"].pop(0), "is not a link of topology"),
        (lambda d: d["nodes"].pop(0), "NPUs"),
        (lambda d: d["nodes"].append({"name": "extra", "kind": "npu"}), "NPUs"),
    ],
)
def test_mismatched_topology_is_refused_with_a_sentence(
    S: Any, tmp_path: Path, edit: Any, message: str
) -> None:
    doc = _explicit(S, GENERATORS["mesh_2x3"])
    sched = _schedule(S, tmp_path, doc, "allreduce", 1)
    other = json.loads(json.dumps(doc))
    edit(other)
    if message == "NPUs" and len(other["nodes"]) > len(doc["nodes"]):
        other["links"] += [["extra", "npu0", 1, 1], ["npu0", "extra", 1, 1]]
    else:
        # keep the topology valid: drop links of a removed node
        names = {n["name"] for n in other["nodes"]}
        other["links"] = [x for x in other["links"] if x[0] in names and x[1] in names]
    res, _ = _sim(tmp_path, other, sched, "x")
    assert res.exit_code != 0
    assert message in res.output and "nothing was simulated" in res.output, res.output
    assert "Traceback" not in res.output
