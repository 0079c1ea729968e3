from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest

from autoccl.bench import results as R
from autoccl.bench import runner


def _doc(fixtures: Path) -> dict[str, Any]:
    return R.load_doc(fixtures / "coll_small.json")


def test_load_doc_rejects_foreign(tmp_path: Path) -> None:
    p = tmp_path / "x.json"
    p.write_text(json.dumps({"schema": "other"}))
    with pytest.raises(R.ResultError, match="not an autoccl bench result"):
        R.load_doc(p)
    p.write_text("{")
    with pytest.raises(R.ResultError, match="cannot read"):
        R.load_doc(p)


def test_report_names_the_file_and_what_is_wrong_with_a_malformed_result(tmp_path: Path) -> None:
    """A result file of the right schema whose rows are not what the report reads is one line naming the
    file and the problem, and a failure: not a traceback from deep in the tables."""
    from click.testing import CliRunner

    from autoccl.cli import main

    head = {"schema": R.SCHEMA, "kind": "coll"}
    cases = [
        ({"rows": "x"}, "'rows' is str, not a list"),
        ({"rows": [1]}, "rows[0] is int, not an object"),
        ({"rows": [{"mode": "nccl"}]}, "rows[0] has no 'coll' (missing)"),
        (
            {"rows": [{"coll": "all_reduce", "bytes": "1M", "load": "none", "mode": "nccl"}]},
            "'bytes' (str, not int)",
        ),
        ({"kind": "train", "iterations": {"a": 1}}, "'iterations' is dict, not a list"),
    ]
    for i, (body, words) in enumerate(cases):
        p = tmp_path / f"bad{i}.json"
        p.write_text(json.dumps({**head, **body}))
        with pytest.raises(R.ResultError, match="not a readable bench result"):
            R.load_doc(p)
        r = CliRunner().invoke(main, ["report", str(p), "-o", str(tmp_path / "out")])
        assert r.exit_code != 0 and isinstance(r.exception, SystemExit), r.exception
        assert f"{p} is not a readable bench result: " in r.output and words in r.output, r.output


def test_oracle_best_per_cell(fixtures: Path) -> None:
    doc = _doc(fixtures)
    best = R.oracle_best(doc["rows"])
    assert len(best) == 8  # 2 colls x 2 sizes x 2 loads
    assert {b["launch"] for b in best} == {"oracle/001"}  # the faster config of the fixture everywhere
    assert all(b["phase"] == "best" and b["mode"] == "oracle" for b in best)


def test_oracle_picks_and_remeasured_summary(fixtures: Path) -> None:
    """Each cell's pick as the rule of its collective in the winning sweep launch; the summary takes a
    cell's re-measurement where there is one and the (biased) pick elsewhere."""
    doc = _doc(fixtures)
    picks = R.oracle_picks(doc["rows"])
    assert sorted(picks) == sorted({r["load"] for r in doc["rows"]})
    rules = dict(part.split(":", 1) for part in next(
        r["config"] for r in doc["rows"] if r.get("launch") == "oracle/001").split(";"))  # fmt: skip
    for cells in picks.values():
        assert len(cells) == 4 and all(c["launch"] == "oracle/001" for c in cells)
        assert all(c["rule"] == rules[{"all_gather": "allgather", "all_reduce": "allreduce"}[c["coll"]]]
                   for c in cells)  # fmt: skip
    best = R.oracle_best(doc["rows"])
    again = dict(best[0], phase="measure", launch="oracle@" + best[0]["load"], busbw_gbs=1.0)
    summary = R.summary_rows(dict(doc, rows=[*doc["rows"], again]))
    oracle = [r for r in summary if r["mode"] == "oracle"]
    assert len(oracle) == len(best)
    assert [r["busbw_gbs"] for r in oracle if r["phase"] == "measure"] == [1.0]


def test_score_under_load_is_makespan() -> None:
    a = {"load": "light", "busbw_gbs": 100.0, "span_ms": 2.0}
    b = {"load": "light", "busbw_gbs": 50.0, "span_ms": 1.0}
    assert R.score(b) > R.score(a)
    assert R.speedup(b, a) == pytest.approx(2.0)
    assert R.score({"load": "none", "busbw_gbs": 7.0}) == 7.0
    assert math.isnan(R.score({"load": "light", "busbw_gbs": 1.0, "span_ms": None}))


def _sweep_row(launch: str, coll: str, bw: float, config: str = "") -> dict[str, Any]:
    return {
        "mode": "static-best",
        "phase": "sweep",
        "launch": launch,
        "config": config or launch,
        "coll": coll,
        "bytes": 1024,
        "load": "none",
        "busbw_gbs": bw,
    }


def test_static_best_geomean_and_eligibility() -> None:
    rows = [
        _sweep_row("a", "all_gather", 100.0),
        _sweep_row("a", "all_reduce", 100.0),
        # b: much better on one cell, worse on the other; geomean 1.0 * sqrt(1.5*0.5)=0.87 of cell bests
        _sweep_row("b", "all_gather", 150.0),
        _sweep_row("b", "all_reduce", 50.0),
        # c: best geomean but failed in one launch -> ineligible
        _sweep_row("c", "all_gather", 200.0),
        _sweep_row("c", "all_reduce", 200.0),
        # d: lacks a cell -> ineligible
        _sweep_row("d", "all_gather", 300.0),
    ]
    sel = R.static_best_choice(rows, failed=["c"])
    assert sel is not None and sel["selected"] == "a"
    table = {t["launch"]: t for t in sel["table"]}
    assert not table["c"]["eligible"] and not table["d"]["eligible"]
    # relative scores: per-cell best is d's 300 (all_gather; d has no all_reduce row), c's 200 (all_reduce)
    assert table["a"]["geomean_rel_score"] == pytest.approx(math.sqrt(100 / 300 * 100 / 200))
    assert table["b"]["geomean_busbw_gbs"] == pytest.approx(math.sqrt(150 * 50))
    assert R.static_best_choice([], []) is None


def test_csv_and_markdown(fixtures: Path) -> None:
    doc = _doc(fixtures)
    rows = doc["rows"] + R.oracle_best(doc["rows"])
    parsed = list(csv.DictReader(io.StringIO(R.csv_text(rows))))
    assert len(parsed) == len(rows)
    assert list(parsed[0]) == list(R.CSV_FIELDS)
    assert float(parsed[0]["busbw_gbs"]) == pytest.approx(rows[0]["busbw_gbs"], rel=1e-5)
    md = R.coll_markdown(doc)
    assert "## all_gather (AG), load none" in md and "## all_reduce (AR), load light" in md
    # online is 0.8x the time of nccl -> 1.25x busbw; under load makespan 0.9x -> 1.11x
    line = next(ln for ln in md.splitlines() if ln.startswith("| 1M |"))
    assert "1.25x" in line and "1.43x" in line  # oracle best = 0.7x time
    light = md.split("load light")[1]
    assert "1.11x" in light.splitlines()[5]


def test_write_outputs(fixtures: Path, tmp_path: Path) -> None:
    paths = R.write_outputs(_doc(fixtures), tmp_path / "sub" / "res")
    assert [p.name for p in paths] == ["res.json", "res.csv", "res.md"]
    assert R.load_doc(paths[0])["kind"] == "coll"
    tdoc = R.load_doc(fixtures / "train_small.json")
    tpaths = R.write_outputs(tdoc, tmp_path / "train")
    assert len(tpaths[1].read_text().splitlines()) == 1 + 100
    assert "| fsdp2 | online | 354M | 27.00 |" in tpaths[2].read_text()


def test_merge_docs(fixtures: Path) -> None:
    a, b = _doc(fixtures), _doc(fixtures)
    b["rows"] = [r for r in b["rows"] if r["launch"] == "oracle/000"]
    m = R.merge_docs([a, b])
    assert len(m["rows"]) == len(a["rows"]) + len(b["rows"])
    with pytest.raises(R.ResultError):
        R.merge_docs([])


def test_steady_and_tuning_tradeoff() -> None:
    assert runner.steady_ms([9.0, 9.0, 1.0, 2.0, 3.0]) == 2.0
    assert runner.steady_ms([5.0, 1.0, 2.0, 3.0]) == 2.5
    # --torch-profile 2 with -n 10: iterations 6-8 ran under the profiler (6 its warm-up) and stay out
    window = runner.profiled_iterations({"iters": 10, "torch_profile": 2})
    assert window == (6, 9)
    assert runner.profiled_iterations({"iters": 10, "torch_profile": 0}) is None
    assert runner.profiled_iterations({"iters": 10}) is None
    profiled = [9.0] * 5 + [1.0, 50.0, 60.0, 70.0, 3.0]
    assert runner.steady_ms(profiled, window) == 2.0 and runner.steady_ms(profiled) == 50.0
    # the first 10 iterations' mean leaves the profiled ones out too (a short run's window reaches them)
    assert runner.first_ms(profiled, window) == pytest.approx((9.0 * 5 + 1.0 + 3.0) / 7)
    assert runner.first_ms(profiled) == pytest.approx(sum(profiled) / 10)
    assert runner.first_ms([4.0, 6.0]) == 5.0 and math.isnan(runner.first_ms([]))
    t_profiled = runner.tuning_tradeoff([2.0] * 10, profiled, leave_out=window)
    assert t_profiled["gain_ms"] == pytest.approx(0.0)
    base = [50.0] * 5 + [30.0] * 45
    online = [60.0, 55.0, 45.0, 40.0, 35.0] + [27.0] * 45
    t = runner.tuning_tradeoff(online, base, search_end=5)
    assert t["gain_ms"] == pytest.approx(3.0)
    assert t["search_window_iters"] == 5
    cost_ms = (60 - 50) + (55 - 50) + (45 - 50) + (40 - 50) + (35 - 50)  # against plain's same iterations
    assert t["search_cost_s"] == pytest.approx(cost_ms / 1e3)
    assert t["break_even_iters"] == 0.0  # the window cost nothing against plain: nothing to repay
    costly = runner.tuning_tradeoff([80.0] * 5 + [27.0] * 45, base, search_end=5)
    assert costly["search_cost_s"] == pytest.approx(0.15)
    assert costly["break_even_iters"] == pytest.approx(150 / 3.0)
    # without a trace the window is the first half
    assert runner.tuning_tradeoff(online, base)["search_window_iters"] == 25
    worse = runner.tuning_tradeoff([40.0] * 10, [30.0] * 10)
    assert worse["gain_ms"] < 0 and math.isnan(worse["break_even_iters"])
    # a launch whose steps move by ±15 % around a level equal to plain's pays no search cost by this measure,
    # where its own steady level charged it for every slow step before the last one
    wobble = [30.0 * (1.15 if i % 7 == 0 else 0.85 if i % 5 == 0 else 1.0) for i in range(400)]
    assert runner.tuning_tradeoff(wobble, wobble, search_end=60)["search_cost_s"] == 0.0


def _task(calls: int, *changes: int) -> dict[str, Any]:
    return {"calls": calls, "converged_at": changes[-1] if changes else 0, "changes": list(changes)}


def test_search_end_maps_calls_to_iterations() -> None:
    from autoccl.bench import trace as T

    # 12 calls an iteration, changes at calls 35 and 79 -> iterations 2 and 6 (0-based); a set-up broadcast
    # (1 call) does not count
    assert T.search_end_iteration([_task(1188, 35, 79), _task(1, 0)], 100, 10) == 6
    # a once-a-step task with 99 calls (DDP's first step has buckets of its own) counts
    assert T.search_end_iteration([_task(1188, 79), _task(99, *range(2, 80, 3)), _task(1, 0)], 100, 10) == 77
    # never settled for 10 iterations: the whole run
    assert T.search_end_iteration([_task(100, *range(5, 100, 5))], 100, 10) == 100
    # a late change after a settled stretch (the guard's re-check) is part of the tuned job
    assert T.search_end_iteration([_task(400, 30, 60, 300, 330)], 400, 40) == 60
    assert T.search_end_iteration([_task(100)], 100, 10) == 0  # never changed
    assert T.search_end_iteration([_task(1, 0), _task(30, 29)], 100, 10) is None
    assert T.search_end_iteration([], 100, 10) is None


def test_tuned_window_and_its_warning() -> None:
    base = [50.0] * 100
    online = [70.0] * 40 + [45.0] * 60
    early = runner.tuned_window(online, base, [_task(100, *range(0, 40, 3), 39)])
    assert early["search_end_iter"] == 39 and not early["search_in_steady_window"]
    assert early["tuned_ms"] == 45.0 and early["plain_same_iters_ms"] == 50.0
    late = runner.tuned_window(online, base, [_task(100, *range(0, 80, 3))])
    assert late["search_end_iter"] == 100  # 21 iterations after the last change: never settled for 30
    assert late["search_in_steady_window"] and late["tuned_ms"] is None
    row = {
        "parallel": "ddp",
        "mode": "online",
        "launch": "ddp/online",
        "steady_ms": 45.0,
        "tokens_per_s": 1.0,
        "first10_ms": 70.0,
    }
    doc = {"settings": {"iters": 100}, "train": [{**row, **late}]}
    md = R.train_markdown(doc)
    assert "until iteration 100 of 100, inside the steady window" in md
    assert "| 100 | – |" in md
    assert "inside the steady window" not in R.train_markdown({"train": [{**row, **early}]})
    assert "| 39 | 45.00 (50.00) |" in R.train_markdown({"train": [{**row, **early}]})


def test_estimate_scales_with_work() -> None:
    from autoccl.bench import modes as M
    from autoccl.bench.spec import parse_loads

    def est(loads: str, sizes: list[int]) -> float:
        o = runner.CollOptions(
            colls=["all_reduce"],
            sizes=sizes,
            dtype="bf16",
            loads=parse_loads(loads),
            modes=M.parse_modes(["nccl"]),
            device="cuda",
            backend="nccl",
        )
        return runner.estimate_coll_s(o, runner.plan_coll(o, Path("/tmp")), 4, 100.0, 10.0)

    one = est("none", [1 << 30])
    # 1 launch start-up + (5 + 100) iterations of 1 GiB * 1.5 / 100 GB/s (+20 us)
    assert one == pytest.approx(10.0 + 105 * ((1 << 30) * 1.5 / 100e9 + 20e-6))
    assert est("none,light", [1 << 30]) == pytest.approx(one + 305 * ((1 << 30) * 1.5 / 100e9 + 20e-6))


def test_failed_launch_line_names_the_workers_exception() -> None:
    # A LaunchError's first line ends in "end of <log>:"; the report's line must carry the log's last line.
    first = "rank 1 exited with status 1; end of /x/rank1.log:"
    err = f"{first}\n[rank1]: Traceback\n[rank1]: ValueError: bad\n\n"
    assert R.error_summary(err) == f"{first} … [rank1]: ValueError: bad"
    assert R.error_summary("launch timed out; logs in /x") == "launch timed out; logs in /x"
    assert R.error_summary("") == ""
    doc = {"train": [], "failures": [{"launch": "fsdp2/nccl", "error": err}]}
    assert "- `fsdp2/nccl`: rank 1 exited with status 1; end of /x/rank1.log: … [rank1]: ValueError: bad" in (
        R.train_markdown(doc)
    )
    assert "ValueError: bad" in R.coll_markdown({"rows": [], "failures": [{"launch": "nccl", "error": err}]})


def test_gloo_train_table_shows_no_tuning_trade_off() -> None:
    """On gloo no plugin is loaded: the online row's search cost, gain and break-even (computed from two gloo
    launches) are shown as —, with a note; on NCCL they are shown."""
    row = {
        "parallel": "ddp",
        "mode": "online",
        "launch": "ddp/online",
        "steady_ms": 3.68,
        "tokens_per_s": 1.0,
        "first10_ms": 7.11,
        "search_cost_s": 0.046,
        "gain_ms": 2.70,
        "break_even_iters": 38.0,
    }
    plain = {**row, "mode": "nccl", "launch": "ddp/nccl"}
    for k in ("search_cost_s", "gain_ms", "break_even_iters"):
        plain.pop(k)
    gloo = R.train_markdown({"settings": {"device": "cpu", "backend": "gloo"}, "train": [plain, row]})
    assert "| 7.11 | withheld | withheld | withheld | – | – |" in gloo
    assert "2.70" not in gloo and "| 38 |" not in gloo
    assert "| ddp | nccl | – | 3.68 | 1 | 7.11 | – | – | – |" in gloo  # no trade-off computed: as before
    assert "Tuning cost, gain and break-even are withheld here: gloo loads no plugin" in gloo
    nccl = R.train_markdown({"settings": {"device": "cuda", "backend": "nccl"}, "train": [plain, row]})
    assert "| 7.11 | 0.046 | 2.70 | 38 |" in nccl and "gloo loads no plugin" not in nccl


def test_train_table_shows_no_gain_for_a_launch_that_fell_back_to_nccl() -> None:
    """An online launch whose steady window ran NCCL's own configurations (trace.fell_back_to_nccl) has no
    gain of its own: the table shows gain and break-even as — and says what the difference is."""
    row = {
        "parallel": "ddp",
        "mode": "online",
        "launch": "ddp/online",
        "steady_ms": 258.7,
        "tokens_per_s": 1.0,
        "first10_ms": 335.2,
        "search_cost_s": 5.091,
        "gain_ms": 24.66,
        "break_even_iters": 206.4,
        "fell_back_to_nccl": True,
        "second_half_nccl_share": 1.0,
    }
    md = R.train_markdown({"settings": {"device": "cuda", "backend": "nccl"}, "train": [row]})
    assert "| 335.20 | 5.091 | withheld | withheld |" in md and "| 206 |" not in md
    assert "ddp online ran NCCL's choice on 100 % of its second half's calls" in md
    assert "its steady step is 24.66 ms/iter faster than plain NCCL's" in md
    kept = R.train_markdown({"train": [{**row, "fell_back_to_nccl": False}]})
    assert "| 335.20 | 5.091 | 24.66 | 206 |" in kept and "ran NCCL's choice" not in kept
    # a launch that never left NCCL's choice (a table of NCCL's choices): no gain of its decisions either,
    # and its measured ratio kept (the plugin's presence), said as such
    never = {
        **row,
        "mode": "table",
        "gain_ms": -3.5,
        "fell_back_to_nccl": False,
        "recurring_tasks": 4,
        "tasks_tried": 0,
        "tasks_at_nccl": 4,
    }
    md = R.train_markdown({"train": [never]})
    assert "| 335.20 | 5.091 | withheld | withheld |" in md
    assert "ddp table ran NCCL's choice on 100 % of its second half's calls** and tried no other" in md
    assert "3.50 ms/iter slower than plain NCCL's" in md and "keeps its measured ratio" in md
    assert "withheld" not in R.train_markdown({"train": [{**never, "tasks_at_nccl": 3}]})


def _strict(text: str) -> Any:
    """JSON as jq or JSON.parse read it: NaN and Infinity are errors."""

    def refuse(word: str) -> Any:
        raise ValueError(f"{word} is not JSON")

    return json.loads(text, parse_constant=refuse)


def test_the_result_document_is_strict_json_and_reads_back(fixtures: Path, tmp_path: Path) -> None:
    """A value without a finite number (a break-even without a gain, a slowdown over a zero time, a
    resilience launch's mean step without steps) is null in PREFIX.json, not NaN; the tables read the file
    back with null where they had NaN, and a file of an earlier version that holds NaN still loads."""
    doc = R.load_doc(fixtures / "train_small.json")
    worse = runner.tuning_tradeoff([60.0] * 10, [50.0] * 10)  # no gain: break-even NaN
    assert math.isnan(worse["break_even_iters"])
    row = {
        "parallel": "ddp",
        "mode": "online",
        "launch": "ddp/online",
        "steady_ms": math.nan,
        "tokens_per_s": math.inf,
        "first10_ms": 70.0,
        "mean_step_ms": math.nan,
        **worse,
    }
    doc["train"] = [*doc["train"], row]
    path = R.write_outputs(doc, tmp_path / "res")[0]
    text = path.read_text()
    back = _strict(text)
    kept = back["train"][-1]
    assert kept["break_even_iters"] is None and kept["steady_ms"] is None and kept["tokens_per_s"] is None
    assert kept["gain_ms"] == worse["gain_ms"]
    md = R.train_markdown(R.load_doc(path))
    assert "| ddp | online | – | – | – | 70.00 |" in md, md
    # an earlier version's file with NaN in it
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**back, "train": [{**kept, "steady_ms": math.nan}]}))
    assert "NaN" in old.read_text()
    assert math.isnan(R.load_doc(old)["train"][0]["steady_ms"])
    R.train_markdown(R.load_doc(old))


def test_strict_json_turns_every_non_finite_number_into_null() -> None:
    from autoccl import jsonout

    value = {"a": [1.0, math.nan, (math.inf, -math.inf)], "b": {"c": math.nan, "d": "NaN"}, "e": 2, "f": None}
    assert _strict(jsonout.dumps(value)) == {"a": [1.0, None, [None, None]], "b": {"c": None, "d": "NaN"},
                                             "e": 2, "f": None}  # fmt: skip
    with pytest.raises(ValueError):  # a NaN a default= hands back is refused, not written
        jsonout.dumps({"x": object()}, default=lambda o: math.nan)
