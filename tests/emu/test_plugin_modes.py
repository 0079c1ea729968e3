"""The real plugin (libautoccl-nccl.so) inside the emulator: modes off/observe/fixed/table, timing under
run-ahead and reordering, degradation on bad settings and corrupt caches, fuzzed inputs."""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import pytest
from emu_helpers import assert_clean, assert_default, config_key
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoccl.emu import Call, Comm, Group, Scenario, run

GRAIN = {"ll": 16, "ll128": 1920, "simple": 512}
HW = "NVIDIA H200x4"


def nccl_chunk(coll: str, algo: str, proto: str) -> int:
    """NCCL's default chunk for ring paths (the emulator's calcCollChunking)."""
    if proto == "ll":
        return 32768
    if proto == "ll128":
        return 576000
    return 524288 if coll in ("broadcast", "reduce") or algo != "ring" else 2097152


def workload(runahead: int = 3, reorder: int = 6, repeat: int = 3, pp: bool = True) -> Scenario:
    comms = [
        Comm("dp", 0x1DA7A, (0, 1, 2, 3)),
        Comm("tp", 0x2BEEF, (0, 1, 2, 3), channels=32),
    ]
    if pp:  # a 2-rank comm (pipeline stage pair): another fingerprint than the 4-rank comms
        comms.append(Comm("pp", 0x3CAFE, (1, 2)))
    groups = [
        Group("dp", (Call("allreduce", 64 << 20),), repeat=repeat),
        Group("tp", (Call("allgather", 4 << 20),), repeat=repeat),
        Group("dp", (Call("allreduce", 1 << 20), Call("allreduce", 2 << 20)), repeat=repeat),
        Group("tp", (Call("reducescatter", 16 << 20),), repeat=repeat),
    ]
    if pp:
        groups += [
            Group("pp", (Call("broadcast", 256 << 10),), repeat=repeat),
            Group("pp", (Call("allreduce", 8 << 20),), repeat=repeat),
        ]
    return Scenario(
        comms,
        groups,
        seed=11,
        runahead=runahead,
        reorder=reorder,
        orders={1: "reverse", 2: "random", 3: "sequential"},
    )


def run_plugin(plugin: Path, env: dict[str, str], **kw: Any) -> Any:
    base = {"AUTOCCL_HW": HW}
    base.update(env)
    return run(kw.pop("scenario", None) or workload(), plugin=plugin, env=base, **kw)


FIXED = "allreduce@1M-64M:ring/ll128/16/chunk=131072;allgather:ring/ll/8;*:ring/simple/12"


def expected_fixed(rec: dict[str, Any], v6: bool) -> tuple[str, str, int, int]:
    coll, nbytes = rec["coll"], rec["task_bytes"]
    if coll == "allreduce" and (1 << 20) <= nbytes <= (64 << 20):
        algo, proto, ch, chunk = "ring", "ll128", 16, 131072
    elif coll == "allgather":
        algo, proto, ch, chunk = "ring", "ll", 8, 0
    else:
        algo, proto, ch, chunk = "ring", "simple", 12, 0
    default = nccl_chunk(coll, algo, proto)
    applied = min(chunk, default) if (chunk and v6) else default
    return (algo, proto, min(ch, rec["comm_channels"]), applied // GRAIN[proto] * GRAIN[proto])


@pytest.mark.parametrize(
    ("processes", "version"),
    [
        pytest.param(False, "6", marks=pytest.mark.sanitize),
        pytest.param(False, "5", marks=pytest.mark.sanitize),
        (True, "6"),
        (True, "5"),
    ],
)
def test_fixed_mode_applies_exactly(plugin: Path, processes: bool, version: str) -> None:
    res = run_plugin(
        plugin, {"AUTOCCL_MODE": "fixed", "AUTOCCL_FIXED": FIXED}, processes=processes, tuner_version=version
    )
    assert_clean(res)
    assert all(s["tuner"] == int(version) for s in res.summaries)
    for rec in res.calls:
        assert config_key(rec) == expected_fixed(rec, version == "6"), rec
    assert len({r["comm"] for r in res.calls}) == 3
    assert not res.warn_lines(), res.warn_lines()
    decided = [t for t in res.trace if t.get("ev") == "call"]
    assert decided and all(t["source"] == "fixed" for t in decided)


def fixed_on_two_batches_of_one_collective(plugin: Path, fixed: str) -> Any:
    """Fixed mode (tuner v6) on one group of all_reduce 2 MiB and 256 MiB: more than 4x apart, so NCCL makes
    them two batches."""
    sc = Scenario(
        [Comm("dp", 0x1DA7A, (0, 1, 2, 3))],
        [Group("dp", (Call("allreduce", 2 << 20), Call("allreduce", 256 << 20)), repeat=4)],
        seed=5,
        runahead=2,
    )
    env = {"AUTOCCL_MODE": "fixed", "AUTOCCL_FIXED": fixed}
    res = run_plugin(plugin, env, scenario=sc, tuner_version="6")
    assert_clean(res)
    return res


@pytest.mark.sanitize
def test_fixed_mode_chunk_per_batch_of_a_group(plugin: Path) -> None:
    """NCCL >= 2.30.3 asks every batch's algorithm (getCollInfo) before any chunk (getChunkSize, which names
    no task), as the emulator does: a batch still runs the chunk decided for it when a later batch of the
    group is of the same collective on another pair (before, the later decision hid it: NCCL's chunk)."""
    res = fixed_on_two_batches_of_one_collective(plugin, FIXED)
    assert {r["task_bytes"] for r in res.calls} == {2 << 20, 256 << 20}
    for rec in res.calls:
        assert config_key(rec) == expected_fixed(rec, True), rec
    small = [r for r in res.calls if r["task_bytes"] == 2 << 20]
    assert all(r["chunk"] == 130560 for r in small)  # 131072 down to the LL128 grain, not NCCL's 576000


def test_fixed_mode_chunk_same_pair_in_one_group_is_the_latest(plugin: Path) -> None:
    """Two batches of one collective on the same pair with different chunks in one group: NCCL's question
    cannot say which batch asks, so both run the group's latest decision for the pair (the larger batch's,
    NCCL decides batches by ascending size), the same on every rank. A documented limit."""
    res = fixed_on_two_batches_of_one_collective(
        plugin, "allreduce@1M-4M:ring/simple/12/chunk=262144;*:ring/simple/12"
    )
    assert res.calls and all(config_key(r) == ("ring", "simple", 12, 2097152) for r in res.calls)


def fnv1a64(text: str) -> str:
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{h:016x}"


def write_table(path: Path, ranks: int, tasks: list[str], nccl: int = 22809) -> None:
    canon = f'gpu="NVIDIA H200" gpus=4 nccl={nccl} ranks={ranks} nodes=1 nvl_domains=1'
    lines = [
        "# autoccl table v1",
        f"fingerprint {fnv1a64(canon)}",
        f"meta {canon} created=2026-11-21T19:00:00Z",
    ]
    lines += [f"task {t} time_us=100 nccl_us=120 samples=20" for t in tasks]
    path.write_text("\n".join(lines) + "\n")


TABLE_TASKS = {
    ("allreduce", 64 << 20): ("ring", "ll128", 20, 0),
    ("allgather", 4 << 20): ("ring", "ll128", 32, 0),
    ("reducescatter", 16 << 20): ("ring", "simple", 40, 1 << 20),
}


@pytest.mark.parametrize("processes", [pytest.param(False, marks=pytest.mark.sanitize), True])
def test_table_mode_applies_exactly(plugin: Path, tmp_path: Path, processes: bool) -> None:
    table = tmp_path / "t.table"
    tasks = [
        f"coll={c} bytes={b} pipe=1 algo={a} proto={p} channels={ch} chunk={k}"
        for (c, b), (a, p, ch, k) in TABLE_TASKS.items()
    ]
    write_table(table, 4, tasks)
    res = run_plugin(
        plugin,
        {"AUTOCCL_MODE": "table", "AUTOCCL_TABLE": str(table)},
        processes=processes,
        scenario=workload(pp=False),
    )
    assert_clean(res)
    assert not res.warn_lines(), res.warn_lines()
    hit = 0
    for rec in res.calls:
        want = TABLE_TASKS.get((rec["coll"], rec["task_bytes"]))
        if want is None or rec["nranks"] != 4:
            assert config_key(rec) == (
                rec["def_algo"],
                rec["def_proto"],
                rec["def_channels"],
                rec["def_chunk"],
            )
            continue
        hit += 1
        algo, proto, ch, chunk = want
        chunk = chunk or nccl_chunk(rec["coll"], algo, proto)
        assert config_key(rec) == (algo, proto, min(ch, rec["comm_channels"]), chunk), rec
    assert hit == 4 * 3 * 3  # 3 table tasks x 3 repeats x 4 ranks


@pytest.mark.sanitize
@pytest.mark.parametrize("processes", [False, True])
def test_observe_changes_nothing(plugin: Path, processes: bool) -> None:
    res = run_plugin(plugin, {"AUTOCCL_MODE": "observe"}, processes=processes)
    assert_clean(res)
    assert_default(res.calls)
    plain = run(workload(), plugin=None, trace=False)
    key = lambda r: (r["comm"], r["rank"], r["group"], r["rep"], r["op"])  # noqa: E731
    want = {key(r): config_key(r) for r in plain.calls}
    assert {key(r): config_key(r) for r in res.calls} == want
    assert any(t.get("ev") == "time" for t in res.trace)


@pytest.mark.parametrize(
    ("processes", "runahead", "reorder"),
    [pytest.param(False, 8, 32, marks=pytest.mark.sanitize), (True, 8, 32), (False, 0, 1), (False, 2, 64)],
)
def test_timing_matched_to_call(plugin: Path, processes: bool, runahead: int, reorder: int) -> None:
    sc = workload(runahead=runahead, reorder=reorder, repeat=6)
    res = run_plugin(plugin, {"AUTOCCL_MODE": "observe"}, scenario=sc, processes=processes)
    assert_clean(res)
    truth = {
        (int(r["hash"], 16), r["rank"], r["coll"], r["task_bytes"], r["call"]): r["dur_ns"] for r in res.calls
    }
    times = [t for t in res.trace if t.get("ev") == "time"]
    assert len(times) >= len(truth) // 2, (len(times), len(truth))
    for t in times:
        k = (int(str(t["comm"]), 16), t["rank"], t["coll"], t["bytes"], t["call"])
        assert k in truth, t
        assert t["gpu_us"] == pytest.approx(truth[k] / 1000.0, abs=2e-3), (t, truth[k])


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "i8"])
def test_timing_matched_for_every_element_size(plugin: Path, dtype: str) -> None:
    """The profiler's Coll event gives a count and NCCL's datatype name; the shim turns the name into an
    element size, and a wrong size would match no task of the tuner's (no sample, nothing tuned)."""
    comm = Comm("c", 0x5EED, (0, 1, 2, 3))
    colls = (Call("allgather", 4 << 20), Call("reducescatter", 2 << 20), Call("allreduce", 1 << 20))
    groups = [Group("c", (c,), repeat=6, dtype=dtype) for c in colls]
    res = run_plugin(plugin, {"AUTOCCL_MODE": "observe"}, scenario=Scenario([comm], groups, seed=3))
    assert_clean(res)
    timed = {(t["coll"], t["bytes"]) for t in res.trace if t.get("ev") == "time"}
    assert timed == {(c.coll, c.nbytes) for c in colls}, timed


BAD_SETTINGS = [
    {"AUTOCCL_MODE": "bogus"},
    {"AUTOCCL_MODE": "fixed"},
    {"AUTOCCL_MODE": "fixed", "AUTOCCL_FIXED": "allreduce:warp/ll"},
    {"AUTOCCL_MODE": "fixed", "AUTOCCL_FIXED": "*:ring/simple", "AUTOCCL_MAX_CHANNELS": "-3"},
]


@pytest.mark.parametrize("processes", [pytest.param(False, marks=pytest.mark.sanitize), True])
@pytest.mark.parametrize("env", BAD_SETTINGS, ids=lambda e: "+".join(f"{k}={v}" for k, v in e.items()))
def test_bad_settings_degrade_to_no_tuner(plugin: Path, env: dict[str, str], processes: bool) -> None:
    res = run_plugin(plugin, env, processes=processes)
    assert_clean(res)
    assert_default(res.calls)
    nproc = len(res.returncodes)
    assert len(res.warn_lines()) == nproc, res.warn_lines()  # one WARN per process, through NCCL's logger


@pytest.mark.parametrize("processes", [pytest.param(False, marks=pytest.mark.sanitize), True])
@pytest.mark.parametrize("kind", ["garbage", "bad-fingerprint", "foreign", "bad-task"])
def test_corrupt_cache_degrades(plugin: Path, tmp_path: Path, kind: str, processes: bool) -> None:
    table = tmp_path / "t.table"
    if kind == "garbage":
        table.write_bytes(b"\x00\xffnot a table\n" * 10)
    elif kind == "foreign":
        write_table(table, 4, ["coll=allreduce bytes=67108864 algo=ring proto=ll channels=2"], nccl=22300)
    elif kind == "bad-task":
        write_table(table, 4, ["coll=allreduce bytes=67108864 algo=ring proto=ll channels=999"])
    else:
        write_table(table, 4, [])
        text = table.read_text().splitlines()
        text[1] = "fingerprint 0123456789abcdef"
        table.write_text("\n".join(text) + "\n")
    res = run_plugin(
        plugin,
        {"AUTOCCL_MODE": "table", "AUTOCCL_TABLE": str(table)},
        processes=processes,
        scenario=workload(pp=False),
    )
    assert_clean(res)
    assert_default(res.calls)
    assert len(res.warn_lines()) == len(res.returncodes), res.warn_lines()


def test_unsupported_pairs_never_chosen(plugin: Path) -> None:
    fixed = (
        "allgather:tree/simple/4;broadcast:tree/ll;reducescatter:collnetdirect/simple;"
        "allreduce@0-2M:nvls/simple/4;allreduce:ring/ll128/4"
    )
    res = run_plugin(plugin, {"AUTOCCL_MODE": "fixed", "AUTOCCL_FIXED": fixed, "NCCL_PROTO": "^LL128"})
    assert_clean(res)
    for rec in res.calls:
        assert rec["proto"] != "ll128"
        assert (rec["algo"], rec["proto"]) == (rec["def_algo"], rec["def_proto"]), rec


FIXED_PIECES = st.sampled_from(
    [
        "allreduce",
        "allgather",
        "*",
        "broadcast,reduce",
        "reducescatter",
        "@1K-1G",
        "@0-0",
        "@4G-1K",
        ":",
        "/",
        ";",
        "ring",
        "tree",
        "nvls",
        "pat",
        "ll",
        "ll128",
        "simple",
        "/0",
        "/64",
        "/65",
        "/-1",
        "/chunk=",
        "chunk=4K",
        "chunk=1G",
        "chunk=0",
        "99999999999999999999",
        "K",
        "M",
        ",",
        " ",
        "\t",
        "é",
    ]
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    mode=st.one_of(st.sampled_from(["off", "observe", "fixed", "table", "online", ""]), st.text(max_size=8)),
    fixed=st.lists(FIXED_PIECES, max_size=12).map("".join),
    max_channels=st.one_of(
        st.sampled_from(["", "0", "1", "64", "65", "-1", "1e3", "12abc"]), st.text(max_size=4)
    ),
    table=st.one_of(
        st.binary(max_size=200),
        st.lists(
            st.sampled_from(
                [
                    "# autoccl table v1",
                    "fingerprint 0123456789abcdef",
                    'meta gpu="NVIDIA H200" gpus=4 nccl=22809',
                    "task coll=allreduce bytes=1048576 algo=ring proto=ll channels=64 chunk=0 "
                    "time_us=1 nccl_us=2",
                    "task coll=allreduce bytes=0",
                    "task coll=x",
                    "meta",
                    'meta gpu="',
                    "ranks=4 nodes=1 nvl_domains=1",
                ]
            ),
            max_size=8,
        ).map(lambda ls: ("\n".join(ls) + "\n").encode()),
    ),
)
def test_fuzzed_settings_never_crash(
    plugin: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mode: str,
    fixed: str,
    max_channels: str,
    table: bytes,
) -> None:
    work = tmp_path_factory.mktemp("fuzz")
    (work / "t.table").write_bytes(table)
    env = {
        "AUTOCCL_MODE": mode,
        "AUTOCCL_FIXED": fixed,
        "AUTOCCL_MAX_CHANNELS": max_channels,
        "AUTOCCL_TABLE": str(work / "t.table"),
    }
    env = {k: "".join(c for c in v if c != "\x00") for k, v in env.items()}
    sc = workload(repeat=2)
    res = run_plugin(plugin, env, scenario=sc, workdir=work / "run", timeout=60)
    assert res.returncodes == [0], res.stderr[-2000:]
    assert res.violations == 0 and not res.divergences
    for rec in res.calls:
        assert 1 <= rec["channels"] <= rec["comm_channels"]
    assert len(res.warn_lines()) <= 1 + len(sc.comms) * 4, res.warn_lines()


def test_fuzz_alphabet_is_printable() -> None:
    assert all(c in string.printable or c == "é" for c in "allreduce:ring/ll/8;é")


@pytest.mark.parametrize("processes", [False, True])
def test_manual_mode_splits_the_iteration(plugin: Path, processes: bool) -> None:
    """Mode manual with the real plugin: a DDP-like step (three all_reduce buckets per iteration, each its
    own NCCL group, as DDP launches them) on two ranks. Once three equal iterations have gone by, every
    rank asks NCCL for the HIDDEN count on the first two buckets and the EXPOSED one on the last, leaving
    NCCL's pair alone."""
    sizes = (1 << 20, 25 << 20, 8 << 20)
    steps = [Group("dp", (Call("allreduce", b),)) for _ in range(12) for b in sizes]
    sc = Scenario([Comm("dp", 0xD0D0, (0, 1))], steps, seed=2)
    env = {"AUTOCCL_MODE": "manual", "AUTOCCL_MANUAL_CHANNELS": "2,16"}
    res = run_plugin(plugin, env, scenario=sc, processes=processes)
    assert_clean(res)
    per_rank: dict[int, list[int]] = {}
    for rank in (0, 1):
        calls = sorted((c for c in res.calls if c["rank"] == rank), key=lambda c: int(c["seq"]))
        assert [int(c["task_bytes"]) for c in calls] == list(sizes) * 12
        assert all(c["algo"] == c["def_algo"] and c["proto"] == c["def_proto"] for c in calls)
        per_rank[rank] = [int(c["tuner_channels"]) for c in calls]
    assert per_rank[0] == per_rank[1]
    # the third iteration's last call completes three equal iterations: the first one decided
    assert per_rank[0] == [0] * 8 + [16] + [2, 2, 16] * 9
