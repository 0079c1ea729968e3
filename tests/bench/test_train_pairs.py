"""`autoccl bench train-pairs` on synthetic `bench train` results (no GPU): ratios, median, spread, drift,
the bar's verdict, the files written and the one-sentence errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from autoccl.bench import trace as T
from autoccl.bench import train_pairs as TP
from autoccl.bench.nccl_tests import BenchError
from autoccl.cli import main


def steps(second: float, last: float) -> list[float]:
    """Eight steps: a slow start-up quarter, then `second` through the middle and `last` in the last quarter
    (drift = last / second)."""
    return [50.0, 50.0, second, second, second, second, last, last]


def write_pair(
    path: Path,
    launches: dict[tuple[str, str], tuple[float, list[float]]],
    search_end: int | None = 3,
    settings: dict[str, object] | None = None,
    fell_back: bool | None = None,
    convergence: list[dict[str, object]] | None = None,
) -> Path:
    """A result as `bench train` writes it, with the keys train-pairs reads: (parallel, mode) -> (steady ms,
    per-iteration ms). `fell_back` goes into the online rows; `convergence` into each online launch's
    entry (as the trace's task convergence)."""
    train, iterations = [], []
    for (par, mode), (steady, iter_ms) in launches.items():
        row: dict[str, object] = {
            "parallel": par,
            "mode": mode,
            "launch": f"{par}/{mode}",
            "steady_ms": steady,
        }
        if mode == "online":
            row["search_end_iter"] = search_end
            if fell_back is not None:
                row["fell_back_to_nccl"] = fell_back
        train.append(row)
        iterations.append({"parallel": par, "mode": mode, "launch": f"{par}/{mode}", "iter_ms": iter_ms})
    doc = {
        "kind": "train",
        "command": "autoccl bench train --modes nccl,online",
        "created": "2026-01-01T00:00:00+00:00",
        "host": {"gpus": ["GPU", "GPU"]},
        "settings": settings or {"preset": "tiny", "iters": 8, "world_size": 2},
        "train": train,
        "iterations": iterations,
    }
    if convergence is not None:
        doc["launches"] = [
            {"label": row["launch"], "convergence": convergence} for row in train if row["mode"] == "online"
        ]
    path.write_text(json.dumps(doc))
    return path


# fsdp2: plain steady 100, 110, 120, 108 and online 80, 100, 160, 120 -> speed 1.25, 1.1, 0.75, 0.9
PLAIN = [100.0, 110.0, 120.0, 108.0]
ONLINE = [80.0, 100.0, 160.0, 120.0]


def four_pairs(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [
        write_pair(
            folder / f"pair{i + 1}_default.json",
            {
                ("fsdp2", "nccl"): (p, steps(10.0, 12.0)),
                ("fsdp2", "online"): (o, steps(10.0, 10.0)),
                ("ddp", "nccl"): (50.0, steps(20.0, 19.0)),
                ("ddp", "online"): (40.0, steps(8.0, 10.0)),
            },
            search_end=10 + i,
        )
        for i, (p, o) in enumerate(zip(PLAIN, ONLINE, strict=True))
    ]


def test_ratios_median_spread_and_drift(tmp_path: Path) -> None:
    s = TP.summarize(TP.read_pairs(four_pairs(tmp_path)))
    fsdp2 = s["parallels"]["fsdp2"]
    assert [round(r["speed_ratio"], 4) for r in fsdp2["pairs"]] == [1.25, 1.1, 0.75, 0.9]
    assert fsdp2["median"] == pytest.approx(1.0)
    assert (fsdp2["min"], fsdp2["max"]) == (0.75, 1.25)
    assert fsdp2["baseline_spread"] == pytest.approx(0.2)
    # 0.75 lost more than plain moved between pairs (25 % > 20 %); 0.9 did not
    assert [r["slower_beyond_spread"] for r in fsdp2["pairs"]] == [False, False, True, False]
    assert [r["search_end_iter"] for r in fsdp2["pairs"]] == [10, 11, 12, 13]
    assert fsdp2["pairs"][0]["baseline_drift"] == pytest.approx(1.2)
    assert fsdp2["pairs"][0]["mode_drift"] == pytest.approx(1.0)
    lo, hi = fsdp2["ci95"]
    assert 0.75 <= lo < 1.0 < hi <= 1.25
    ddp = s["parallels"]["ddp"]
    assert ddp["median"] == pytest.approx(1.25)
    assert ddp["baseline_spread"] == pytest.approx(0.0)
    assert ddp["pairs"][0]["baseline_drift"] == pytest.approx(0.95)
    assert ddp["pairs"][0]["mode_drift"] == pytest.approx(1.25)
    assert (fsdp2["bar"], ddp["bar"]) == ("too few pairs", "too few pairs")
    assert s["warnings"] == []


def test_drift_needs_four_steps() -> None:
    assert TP.drift([1.0, 2.0, 3.0]) is None
    assert TP.drift([9.0, 2.0, 2.0, 3.0]) == pytest.approx(1.5)


def test_one_pair_has_no_interval_and_any_loss_counts(tmp_path: Path) -> None:
    path = write_pair(
        tmp_path / "only.json",
        {("ddp", "nccl"): (100.0, steps(1, 1)), ("ddp", "online"): (101.0, steps(1, 1))},
    )
    ddp = TP.summarize(TP.read_pairs([path]))["parallels"]["ddp"]
    assert ddp["ci95"] is None and ddp["baseline_spread"] is None
    assert ddp["pairs"][0]["slower_beyond_spread"] is True
    assert "One pair: nccl's own spread between launches is unknown." in TP.markdown(
        TP.summarize(TP.read_pairs([path]))
    )


def _pairs_with_ratios(folder: Path, ratios: list[float]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [
        write_pair(
            folder / f"pair{i + 1}.json",
            {("ddp", "nccl"): (100.0, steps(1, 1)), ("ddp", "online"): (100.0 / r, steps(1, 1))},
        )
        for i, r in enumerate(ratios)
    ]


def test_bar_sentence(tmp_path: Path) -> None:
    few = TP.markdown(TP.summarize(TP.read_pairs(_pairs_with_ratios(tmp_path / "few", [1.2, 1.1]))))
    assert "too few pairs, 2 of 5 (median so far 1.150×)" in few
    met = TP.markdown(
        TP.summarize(TP.read_pairs(_pairs_with_ratios(tmp_path / "met", [1.0, 1.02] * 2 + [1.04])))
    )
    assert "met, median 1.020× over 5 pairs; the target is not reached." in met
    target = TP.markdown(
        TP.summarize(TP.read_pairs(_pairs_with_ratios(tmp_path / "tgt", [1.06] * 5 + [0.9])))
    )
    assert "met, median 1.060× over 6 pairs; the target is reached." in target
    lost = TP.markdown(TP.summarize(TP.read_pairs(_pairs_with_ratios(tmp_path / "lost", [0.98] * 5))))
    assert "not met, median 0.980× over 5 pairs." in lost


def test_a_fall_back_to_nccls_choice_counts_as_one(tmp_path: Path) -> None:
    """The bar's rule: an online launch that fell back to NCCL's choice counts as 1.00×, unless it lost more
    than plain moved between pairs (12 % here); the measured ratio stays beside it."""
    plain = [100.0, 112.0, 104.0, 108.0, 106.0, 110.0]
    ratios = [0.90, 0.95, 1.10, 1.02, 0.97, 0.80]
    fell = [True, True, False, False, True, True]
    files = [
        write_pair(
            tmp_path / f"pair{i + 1}.json",
            {("ddp", "nccl"): (p, steps(1, 1)), ("ddp", "online"): (p / r, steps(1, 1))},
            fell_back=e,
        )
        for i, (p, r, e) in enumerate(zip(plain, ratios, fell, strict=True))
    ]
    s = TP.summarize(TP.read_pairs(files))
    ddp = s["parallels"]["ddp"]
    assert ddp["baseline_spread"] == pytest.approx(0.12)
    # pair 6 lost 20 %, more than plain moved: its fall-back counts what it measured
    assert [r["slower_beyond_spread"] for r in ddp["pairs"]] == [False] * 5 + [True]
    assert [r["counted_ratio"] for r in ddp["pairs"]] == pytest.approx([1.0, 1.0, 1.10, 1.02, 1.0, 0.80])
    assert ddp["median"] == pytest.approx(0.96)
    assert ddp["counted_median"] == pytest.approx(1.0)
    assert ddp["fell_back_count"] == 4
    assert ddp["bar"] == "met" and not ddp["target_reached"]
    text = TP.markdown(s)
    assert "met, counted median 1.000× [95 % " in text
    assert (
        "measured 0.960× over 6 pairs; 4 of 6 launches fell back to NCCL's choice; the target is not reached."
        in text
    )
    assert "| 4 of 6 | **1.000×** |" in text
    # without the fall-backs the same measurements miss the bar
    for f in files:
        doc = json.loads(f.read_text())
        doc["train"][1]["fell_back_to_nccl"] = False
        f.write_text(json.dumps(doc))
    none_fell = TP.summarize(TP.read_pairs(files))["parallels"]["ddp"]
    assert none_fell["counted_median"] == pytest.approx(0.96) and none_fell["bar"] == "not met"


def _task(
    calls: int, algo: str | None, channels: int = 0, changes: tuple[int, ...] = (0, 1)
) -> dict[str, object]:
    """A task of the trace's convergence: its calls, the call indices where its decision changed, its last
    decision."""
    final = {"algo": algo, "proto": None if algo is None else "simple", "channels": channels, "chunk": None}
    return {"calls": calls, "changes": list(changes), "final": {**final, "chunk_halvings": 0}}


def test_fall_back_from_the_launchs_task_convergence(tmp_path: Path) -> None:
    """Result files whose rows lack the verdict: it comes from the launch's task convergence, over the
    recurring tasks only (8 iterations: a task called 4 times or more). A launch that never tried another
    decision did not fall back, nor one whose last change came in the measured second half."""
    launches = {("ddp", "nccl"): (100.0, steps(1, 1)), ("ddp", "online"): (90.0, steps(1, 1))}
    fell = [_task(8, None), _task(16, None, changes=()), _task(1, "ring", 16)]  # the once-only task: no count
    kept = [_task(8, None), _task(8, "ring", 16)]
    capped = [_task(8, None, channels=8)]  # a channel count forced: not NCCL's choice
    untried = [_task(8, None, changes=()), _task(16, None, changes=())]
    late = [_task(8, None), _task(16, None, changes=(3, 12))]  # call 12 of 2 a step: iteration 6 of 8
    paths = [
        write_pair(tmp_path / "a.json", launches, convergence=fell),
        write_pair(tmp_path / "b.json", launches, convergence=kept),
        write_pair(tmp_path / "c.json", launches, convergence=capped),
        write_pair(tmp_path / "d.json", launches),
        write_pair(tmp_path / "e.json", launches, convergence=[_task(2, None)]),
        write_pair(tmp_path / "f.json", launches, convergence=untried),
        write_pair(tmp_path / "g.json", launches, convergence=late),
    ]
    got = [p.launch("ddp", "online").fell_back_to_nccl for p in TP.read_pairs(paths)]  # type: ignore[union-attr]
    assert got == [True, False, False, None, None, False, False]
    # plain never moved, so a loss would be beyond its spread; these are gains
    rows = TP.summarize(TP.read_pairs(paths))["parallels"]["ddp"]["pairs"]
    assert [r["counted_ratio"] for r in rows] == pytest.approx([1.0] + [100 / 90] * 6)
    assert T.fell_back_to_nccl(late, 8) == {
        "recurring_tasks": 2,
        "tasks_tried": 2,
        "tasks_at_nccl": 2,
        "last_change_iter": 6,
        "second_half_nccl_share": None,  # convergence without runs of decisions: the last change decides
        "fell_back_to_nccl": False,
    }


def test_fall_back_judged_on_the_second_half_of_each_task() -> None:
    """With the runs of decisions: the guard's re-check rounds in the second half (a few of its calls on the
    tuned plan) still leave a fall-back; a launch whose guard kept the tuned plan and that ends inside a
    round's NCCL block does not fall back, though its last calls are NCCL's choice."""

    def task(runs: list[list[object]]) -> dict[str, object]:
        changes = [r[0] for r in runs[1:]]
        nccl = {"algo": None, "proto": None, "channels": 0, "chunk": 0, "chunk_halvings": 0}
        return {"calls": 120, "changes": changes, "runs": runs, "final": nccl}

    # 60 iterations, two calls each; second half = calls 60-119
    rechecked = task([[0, True], [4, False], [20, True], [90, False], [96, True]])  # 54 of 60 on NCCL
    kept_tuned = task([[0, True], [4, False], [110, True]])  # 10 of 60
    a = T.fell_back_to_nccl([rechecked], 60)
    assert a is not None and a["second_half_nccl_share"] == pytest.approx(0.9) and a["fell_back_to_nccl"]
    b = T.fell_back_to_nccl([rechecked, kept_tuned], 60)
    assert b is not None and b["second_half_nccl_share"] == pytest.approx(10 / 60)
    assert b["tasks_at_nccl"] == 2 and not b["fell_back_to_nccl"]


def test_a_pair_missing_a_launch_is_left_out_of_that_kind(tmp_path: Path) -> None:
    files = four_pairs(tmp_path)
    write_pair(
        files[1],
        {
            ("fsdp2", "nccl"): (110.0, steps(1, 1)),
            ("fsdp2", "online"): (100.0, steps(1, 1)),
            ("ddp", "nccl"): (50.0, steps(1, 1)),
        },
    )
    s = TP.summarize(TP.read_pairs([tmp_path]))
    assert s["parallels"]["fsdp2"]["count"] == 4
    assert s["parallels"]["ddp"]["count"] == 3
    assert s["warnings"] == ["pair2_default: no ddp/online launch; left out of ddp"]


def test_no_pair_with_both_launches_is_an_error(tmp_path: Path) -> None:
    path = write_pair(
        tmp_path / "p.json", {("ddp", "nccl"): (1.0, steps(1, 1)), ("ddp", "manual"): (1.0, [])}
    )
    with pytest.raises(
        BenchError, match=r"no pair has both a nccl and a online launch .*modes found: manual, nccl"
    ):
        TP.summarize(TP.read_pairs([path]))


def test_other_settings_are_reported(tmp_path: Path) -> None:
    launches = {("ddp", "nccl"): (1.0, steps(1, 1)), ("ddp", "online"): (1.0, steps(1, 1))}
    a = write_pair(tmp_path / "a.json", launches, settings={"iters": 8})
    b = write_pair(tmp_path / "b.json", launches, settings={"iters": 400})
    assert TP.summarize(TP.read_pairs([a, b]))["warnings"] == [
        "b was measured otherwise than a: iters 400 against 8"
    ]


def test_folders_in_name_order_and_their_other_json_skipped(tmp_path: Path) -> None:
    launches = {("ddp", "nccl"): (1.0, steps(1, 1)), ("ddp", "online"): (1.0, steps(1, 1))}
    for n in (10, 2, 1):
        write_pair(tmp_path / f"pair{n}.json", launches)
    (tmp_path / "notes.json").write_text(json.dumps({"kind": "coll", "rows": []}))
    assert [p.name for p in TP.read_pairs([tmp_path])] == ["pair1", "pair2", "pair10"]


def test_same_names_in_two_folders_keep_their_folder(tmp_path: Path) -> None:
    launches = {("ddp", "nccl"): (1.0, steps(1, 1)), ("ddp", "online"): (1.0, steps(1, 1))}
    for call in ("call1", "call2"):
        (tmp_path / call).mkdir()
        write_pair(tmp_path / call / "pair1.json", launches)
    names = [p.name for p in TP.read_pairs([tmp_path / "call1", tmp_path / "call2"])]
    assert names == ["call1/pair1", "call2/pair1"]


def test_errors_are_one_sentence(tmp_path: Path) -> None:
    with pytest.raises(BenchError, match=r"^\S*missing\.json does not exist$"):
        TP.read_pairs([tmp_path / "missing.json"])
    coll = tmp_path / "coll.json"
    coll.write_text(json.dumps({"kind": "coll", "rows": []}))
    with pytest.raises(BenchError, match=r"coll\.json is not an `autoccl bench train` result"):
        TP.read_pairs([coll])
    (tmp_path / "empty").mkdir()
    with pytest.raises(BenchError, match=r"empty holds no `autoccl bench train` result"):
        TP.read_pairs([tmp_path / "empty"])
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(BenchError, match=r"broken\.json is not JSON"):
        TP.read_pairs([broken])
    twice = tmp_path / "twice.json"
    twice.write_text(
        json.dumps({"train": [{"parallel": "ddp", "mode": "nccl", "steady_ms": 1.0}] * 2, "iterations": []})
    )
    with pytest.raises(BenchError, match=r"more than one ddp/nccl launch"):
        TP.read_pairs([twice])


def test_cli_writes_every_file(tmp_path: Path) -> None:
    four_pairs(tmp_path / "train")
    out = tmp_path / "train" / "pairs"
    r = CliRunner().invoke(main, ["bench", "train-pairs", str(tmp_path / "train"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "**1.000×**" in r.output and "**1.250×**" in r.output
    with open(out / "pairs.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == [
        "pair",
        "parallel",
        "plain_steady_ms",
        "online_steady_ms",
        "speed_ratio",
        "fell_back_to_nccl",
        "counted_ratio",
        "search_end_iter",
        "first_launched",
        "plain_drift",
        "online_drift",
    ]
    assert len(rows) == 8
    assert rows[2] == {
        "pair": "pair3_default",
        "parallel": "fsdp2",
        "plain_steady_ms": "120.0",
        "online_steady_ms": "160.0",
        "speed_ratio": "0.75",
        "fell_back_to_nccl": "",
        "counted_ratio": "0.75",
        "search_end_iter": "12",
        "first_launched": "",
        "plain_drift": "1.2",
        "online_drift": "1.0",
    }
    its = json.loads((out / "iterations.json").read_text())
    assert its[0] == {
        "pair": "pair1_default",
        "parallel": "fsdp2",
        "iter_ms": {"nccl": steps(10.0, 12.0), "online": steps(10.0, 10.0)},
    }
    summary = json.loads((out / "summary.json").read_text())
    assert summary["parallels"]["fsdp2"]["median"] == pytest.approx(1.0)
    assert (
        (out / "summary.md")
        .read_text()
        .startswith("# `autoccl bench train` launch pairs: online against nccl")
    )
    png = (out / "steps.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    # the folder written into the input folder is not read back as pairs
    again = CliRunner().invoke(main, ["bench", "train-pairs", str(tmp_path / "train"), "-o", str(out)])
    assert again.exit_code == 0 and "median of 4" in again.output


def test_cli_errors(tmp_path: Path) -> None:
    r = CliRunner().invoke(
        main, ["bench", "train-pairs", str(tmp_path / "nope.json"), "-o", str(tmp_path / "o")]
    )
    assert r.exit_code == 1
    assert f"Error: {tmp_path / 'nope.json'} does not exist" in r.output
    assert not (tmp_path / "o").exists()
    help_text = CliRunner().invoke(main, ["bench", "--help"]).output
    assert "train-pairs" in help_text


def test_gloo_pairs_say_so_in_the_title(tmp_path: Path) -> None:
    """A CPU run's pairs compare two gloo launches (no NCCL, no plugin): the title says it."""
    pair = {("ddp", "nccl"): (50.0, steps(20.0, 20.0)), ("ddp", "online"): (50.0, steps(20.0, 20.0))}
    settings = {"preset": "tiny", "iters": 8, "world_size": 2, "backend": "gloo"}
    files = [write_pair(tmp_path / f"pair{i}.json", pair, settings=settings) for i in (1, 2)]
    title = TP.markdown(TP.summarize(TP.read_pairs(files))).splitlines()[0]
    assert "gloo, not NCCL" in title
    files = [write_pair(tmp_path / f"gpu{i}.json", pair) for i in (1, 2)]
    assert "gloo" not in TP.markdown(TP.summarize(TP.read_pairs(files))).splitlines()[0]


def test_bench_train_rows_carry_the_fall_back(tmp_path: Path) -> None:
    """What `bench train` adds to an online row from its launch's trace, read back by train-pairs: 60
    iterations, one task called twice a step that tried ring and ended on NCCL's choice by step 10."""
    from autoccl.bench.runner import annotate_online_rows

    task = {
        "calls": 120,
        "changes": [4, 20],
        "runs": [[0, True], [4, False], [20, True]],
        "final": {"algo": None, "proto": None, "channels": 0, "chunk": 0, "chunk_halvings": 0},
    }
    plain, online = [10.0] * 60, [11.0] * 5 + [10.0] * 55
    doc: dict[str, object] = {
        "kind": "train",
        "settings": {"iters": 60},
        "host": {},
        "iterations": [
            {"parallel": "ddp", "mode": "nccl", "launch": "ddp/nccl", "iter_ms": plain},
            {"parallel": "ddp", "mode": "online", "launch": "ddp/online", "iter_ms": online},
        ],
        "train": [
            {"parallel": "ddp", "mode": "nccl", "launch": "ddp/nccl", "steady_ms": 10.0},
            {"parallel": "ddp", "mode": "online", "launch": "ddp/online", "steady_ms": 10.0},
        ],
        "launches": [{"label": "ddp/nccl"}, {"label": "ddp/online", "convergence": [task]}],
    }
    annotate_online_rows(doc)
    row = doc["train"][1]  # type: ignore[index]
    assert row["fell_back_to_nccl"] is True and row["last_change_iter"] == 10
    assert row["second_half_nccl_share"] == 1.0
    assert (row["recurring_tasks"], row["tasks_tried"], row["tasks_at_nccl"]) == (1, 1, 1)
    assert "fell_back_to_nccl" not in doc["train"][0]  # type: ignore[index]
    path = tmp_path / "pair1.json"
    path.write_text(json.dumps(doc))
    assert TP.read_pairs([path])[0].launch("ddp", "online").fell_back_to_nccl is True  # type: ignore[union-attr]


def test_guard_verdicts_from_the_trace_reach_the_pairs_table(tmp_path: Path) -> None:
    """The authority's `guard` trace record (as the engine writes it) becomes the online row's guard_verdicts
    and a line under the pairs table; a record without a first call for a sample keeps the sample alone."""
    from autoccl.bench import trace as T
    from autoccl.bench.runner import annotate_online_rows

    trace = tmp_path / "trace.vm.1.jsonl"
    trace.write_text(
        '{"ev":"guard","comm":"00000000000000ab","rank":0,"period":2,"round_begin":62,"at":93,"winner":"nccl",'
        '"tuned":false,"tuned_us":149500.0,"tuned_samples":8,"nccl_us":148000.0,"nccl_samples":8,'
        '"margin":0.1200,"plan_gain_us":280.0,"unexplained":true,"voided_before":1,"cost_us":18000.0,"regret_us":18000.0,"samples":[{"it":63,"arm":"tuned","us":150000.0,"coll":"allgather","bytes":210243584,'
        '"call":64},{"it":66,"arm":"nccl","us":147000.0,"own_us":146000.0,"ranks":2}]}\n'
        '{"ev":"call","comm":"00000000000000ab","rank":0,"coll":"allgather","bytes":1,"call":0}\n'
    )
    verdicts = T.guard_verdicts(T.read_records([trace]))
    assert len(verdicts) == 1
    v = verdicts[0]
    assert (v["round_begin"], v["at"], v["winner"], v["tuned"]) == (62, 93, "nccl", False)
    assert v["samples"][0] == {
        "it": 63,
        "arm": "tuned",
        "us": 150000.0,
        "own_us": 150000.0,  # a trace without the authority's own time: the sample's
        "ranks": 1,
        "coll": "all_gather",
        "bytes": 210243584,
        "call": 64,
    }
    assert v["samples"][1] == {"it": 66, "arm": "nccl", "us": 147000.0, "own_us": 146000.0, "ranks": 2}

    doc: dict[str, object] = {
        "kind": "train",
        "settings": {"iters": 4},
        "host": {},
        "iterations": [
            {"parallel": "fsdp2", "mode": "nccl", "launch": "fsdp2/nccl", "iter_ms": [150.0] * 4},
            {"parallel": "fsdp2", "mode": "online", "launch": "fsdp2/online", "iter_ms": [150.0] * 4},
        ],
        "train": [
            {"parallel": "fsdp2", "mode": "nccl", "launch": "fsdp2/nccl", "steady_ms": 150.0},
            {"parallel": "fsdp2", "mode": "online", "launch": "fsdp2/online", "steady_ms": 150.0},
        ],
        "launches": [{"label": "fsdp2/nccl"}, {"label": "fsdp2/online", "guard": verdicts}],
    }
    annotate_online_rows(doc)
    row = doc["train"][1]  # type: ignore[index]
    assert row["guard_verdicts"] == [
        {
            "comm": "00000000000000ab",
            "at": 93,
            "winner": "nccl",
            "tuned_us": 149500.0,
            "tuned_samples": 8,
            "nccl_us": 148000.0,
            "nccl_samples": 8,
            "margin": 0.12,
            "plan_gain_us": 280.0,
            "unexplained": True,
            "voided_before": 1,
            "cost_us": 18000.0,
            "regret_us": 18000.0,
        }
    ]
    files = []
    for i in (1, 2):
        files.append(tmp_path / f"pair{i}.json")
        files[-1].write_text(json.dumps(doc))
    md = TP.markdown(TP.summarize(TP.read_pairs(files)))
    assert (
        "- pair1: NCCL's choice from guard iteration 93 of comm …0000ab "
        "(tuned 149.5 ms ×8 against NCCL's 148.0 ms ×8, needed 12.0 %; the plan saves 0.28 ms of kernel time "
        "a step: noise; 1 earlier round void: the iteration grew; the round cost 18.0 ms)"
    ) in md
    # pairs without verdicts in their rows print no such lines
    del doc["launches"][1]["guard"]  # type: ignore[index]
    del row["guard_verdicts"]
    for f in files:
        f.write_text(json.dumps(doc))
    assert "Step guard verdicts" not in TP.markdown(TP.summarize(TP.read_pairs(files)))


def test_an_estimated_arms_positions_reach_the_guard_line(tmp_path: Path) -> None:
    """A verdict kept by the estimated arm (AUTOCCL_STEP_ARMS=estimated=...) carries the positions it capped
    from the trace to the row and the line under the pairs table; other verdicts carry none."""
    from autoccl.bench import trace as T
    from autoccl.bench.runner import guard_row

    trace = tmp_path / "trace.vm.1.jsonl"
    trace.write_text(
        '{"ev":"guard","comm":"00000000000000ab","rank":0,"period":4,"round_begin":150,"at":181,'
        '"winner":"estimated=4","tuned":true,"tuned_us":9062.7,"tuned_samples":8,"nccl_us":9301.8,'
        '"nccl_samples":8,"margin":0.0260,"plan_gain_us":93.7,"unexplained":false,"voided_before":0,'
        '"samples":[],"winner_positions":[0,2],"arms":[]}\n'
        '{"ev":"guard","comm":"00000000000000ab","rank":0,"period":4,"round_begin":450,"at":474,'
        '"winner":"tuned","tuned":true,"tuned_us":9062.7,"tuned_samples":8,"nccl_us":9301.8,"nccl_samples":8,'
        '"margin":0.0260,"plan_gain_us":93.7,"unexplained":false,"voided_before":0,"samples":[]}\n'
    )
    verdicts = T.guard_verdicts(T.read_records([trace]))
    assert verdicts[0]["winner_positions"] == [0, 2] and "winner_positions" not in verdicts[1]
    rows = [guard_row(v) for v in verdicts]
    assert rows[0]["winner_positions"] == [0, 2] and "winner_positions" not in rows[1]
    assert TP.guard_text(rows[0]).startswith("estimated=4 on positions 0,2 from guard iteration 181 of comm")
    assert TP.guard_text(rows[1]).startswith("kept the tuned plan from guard iteration 474")


def test_launch_order_of_each_pair_and_the_median_by_order(tmp_path: Path) -> None:
    """Pairs that launched online first (every second pair on the GPU machine) say so, and the table gives
    each order's median speed; pairs of one order alone, or whose settings name no modes, print no such
    line."""
    paths = four_pairs(tmp_path)
    for i, path in enumerate(paths):
        doc = json.loads(path.read_text())
        doc["settings"]["modes"] = ["online", "nccl"] if i % 2 else ["nccl", "online"]
        path.write_text(json.dumps(doc))
    s = TP.summarize(TP.read_pairs(paths))
    assert [r["first"] for r in s["parallels"]["fsdp2"]["pairs"]] == ["nccl", "online", "nccl", "online"]
    # fsdp2 speeds 1.25, 1.1, 0.75, 0.9: nccl first 1.25 and 0.75 (median 1.0), online first 1.1 and 0.9
    md = TP.markdown(s)
    assert (
        "By launch order: 1.000× median over 2 pairs with nccl launched first, "
        "1.000× over 2 with online first." in md
    )
    assert [r["first_launched"] for r in TP.csv_rows(s)][:4] == ["nccl", "online", "nccl", "online"]
    s1 = TP.summarize(TP.read_pairs(four_pairs(tmp_path / "no-modes")))
    assert s1["parallels"]["fsdp2"]["pairs"][0]["first"] is None
    assert "By launch order" not in TP.markdown(s1)


def test_files_are_strict_json_and_null_reads_as_nan_did(tmp_path: Path) -> None:
    """A `bench train` result writes a step or steady level without a number as null (NaN in earlier
    versions): train-pairs reads both alike (a launch without a steady step is left out with a warning, not
    an unreadable file), and its own summary.json and iterations.json hold null, never NaN."""
    files = four_pairs(tmp_path / "train")
    doc = json.loads(files[1].read_text())
    for row in doc["train"]:
        if (row["parallel"], row["mode"]) == ("ddp", "online"):
            row["steady_ms"] = None
    doc["iterations"][0]["iter_ms"][0] = None
    files[1].write_text(json.dumps(doc))
    doc = json.loads(files[2].read_text())
    doc["iterations"][0]["iter_ms"][0] = float("nan")  # an earlier version's file
    files[2].write_text(json.dumps(doc))
    out = tmp_path / "pairs"
    r = CliRunner().invoke(main, ["bench", "train-pairs", str(tmp_path / "train"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "pair2_default: ddp has no positive steady step; left out of ddp" in r.output

    def refuse(word: str) -> object:
        raise ValueError(f"{word} is not JSON")

    summary = json.loads((out / "summary.json").read_text(), parse_constant=refuse)
    assert summary["parallels"]["ddp"]["count"] == 3
    its = json.loads((out / "iterations.json").read_text(), parse_constant=refuse)
    assert its[1]["iter_ms"]["nccl"][0] is None and its[2]["iter_ms"]["nccl"][0] is None
