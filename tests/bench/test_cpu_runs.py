"""End-to-end runs on the CPU backend (gloo): the harness really starts N processes per launch."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from autoccl.bench import results as R
from autoccl.bench.launch import LaunchError, Topology, detect_topology, run_launch
from autoccl.bench.presets import PRESETS
from autoccl.bench.spec import bus_factor
from autoccl.cli import main

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _pythonpath(monkeypatch: pytest.MonkeyPatch) -> None:
    # workers are `python -m autoccl.bench.worker`: they must import this checkout
    pp = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO / "python"), *([pp] if pp else [])]))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    for var in ("WORLD_SIZE", "RANK", "SLURM_NTASKS", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)


def _run(args: list[str]) -> Any:
    return CliRunner().invoke(main, args, catch_exceptions=False)


CPU = ["--device", "cpu", "--backend", "gloo", "--nproc", "2", "--no-progress"]


def test_coll_two_modes_with_load_and_check(tmp_path: Path) -> None:
    prefix = tmp_path / "r"
    r = _run(
        [
            "bench",
            "coll",
            *CPU,
            "--colls",
            "all",
            "--sizes",
            "4K,16K",
            "--dtype",
            "fp32",
            "--modes",
            "nccl,static:NCCL_PROTO=LL128,NCCL_ALGO=Ring",
            "-w",
            "1",
            "-n",
            "2",
            "-r",
            "2",
            "--check",
            "--load",
            "none,gemm:32x32x32:fp32",
            "-o",
            str(prefix),
        ]
    )
    assert r.exit_code == 0, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    assert [ln["label"] for ln in doc["launches"]] == ["nccl", "static:NCCL_PROTO=LL128,NCCL_ALGO=Ring"]
    env0, env1 = (ln["rank0_env"] for ln in doc["launches"])
    assert "NCCL_PROTO" not in env0 and env0["NCCL_NVLS_ENABLE"] == "0"
    assert (
        env1["NCCL_PROTO"] == "LL128" and env1["NCCL_ALGO"] == "Ring" and env1["NVSHMEM_DISABLE_NVLS"] == "1"
    )
    rows = doc["rows"]
    assert len(rows) == 2 * 6 * 2 * 2
    assert doc["host"]["torch"] and doc["settings"]["world_size"] == 2
    for row in rows:
        assert row["check"] == "ok", row
        assert row["busbw_gbs"] == pytest.approx(
            row["bytes"] * bus_factor(row["coll"], 2) / (row["time_us"] * 1e-6) / 1e9, rel=1e-9
        )
        assert row["time_us_min"] <= row["time_us"] <= row["time_us_max"]
        assert len(row["time_us_all"]) == 2
        if row["load"] != "none":
            assert row["span_ms"] * 1e3 >= 0.999 * max(
                row["comm_load_us"] * 2, row["gemm_load_us"] * row["gemm_reps"]
            )
            assert row["serial_ms"] > 0 and row["gemm_slowdown"] > 0
    # the GEMM work of a loaded cell is fixed by the first launch, so makespans compare across modes
    by = {(r["mode"], r["coll"], r["bytes"]): r["gemm_reps"] for r in rows if r["load"] != "none"}
    for (_mode, coll, b), g in by.items():
        assert by[("nccl", coll, b)] == g
    assert prefix.with_suffix(".csv").read_text().count("\n") == 1 + len(rows)
    assert "vs nccl" in prefix.with_suffix(".md").read_text()


def test_sweeps_online_and_failures(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Plugin modes on gloo: the environment is set (a stand-in file for the library), gloo ignores it.
    libdir = tmp_path / "lib"
    libdir.mkdir()
    (libdir / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(libdir))
    prefix = tmp_path / "s"
    r = _run(
        [
            "bench",
            "coll",
            *CPU,
            "--colls",
            "ag,ar",
            "--sizes",
            "8K",
            "--dtype",
            "fp32",
            "--modes",
            "static-best,oracle,online",
            "-w",
            "1",
            "-n",
            "2",
            "-r",
            "2",
            "--static-space",
            "NCCL_PROTO=LL;GLOO_SOCKET_IFNAME=nonexistent0",
            "--oracle-channels",
            "8",
            "--oracle-protos",
            "ll",
            "--online-warmup",
            "3",
            "--channel-ceiling",
            "32",
            "--nccl-channels",
            "12",
            "-o",
            str(prefix),
        ]
    )
    # the GLOO_SOCKET_IFNAME setting cannot start: one failed launch, reported, the rest goes on
    assert r.exit_code == 1 and "1 launch(es) failed" in r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    labels = [ln["label"] for ln in doc["launches"]]
    assert labels == [
        "static-best/default",
        "static-best/NCCL_PROTO=LL",
        "static-best/GLOO_SOCKET_IFNAME=nonexistent0",
        "oracle/000",
        "oracle/001",
        "online@none",
        "static-best",
        "oracle@none/w8",
    ]
    assert [f["launch"] for f in doc["failures"]] == ["static-best/GLOO_SOCKET_IFNAME=nonexistent0"]
    # the oracle's picks, re-measured in one fresh launch forcing each cell's rule at its size alone
    picks = doc["oracle_picks"]["none"]
    assert [(p["coll"], p["bytes"]) for p in picks] == [("all_gather", 8192), ("all_reduce", 8192)]
    remeasure = doc["launches"][-1]
    assert remeasure["phase"] == "measure" and remeasure["rank0_env"]["AUTOCCL_MODE"] == "fixed"
    assert remeasure["rank0_env"]["AUTOCCL_FIXED"] == ";".join(
        f"{c}@8192-8192:{p['rule']}"
        for c, p in zip(("allgather", "allreduce"), picks, strict=True)
        if p["rule"] is not None  # picked from a launch that left it to NCCL
    )
    sb = doc["static_best"]
    assert sb["selected"] in ("static-best/default", "static-best/NCCL_PROTO=LL")
    assert {t["launch"]: t["eligible"] for t in sb["table"]}[
        "static-best/GLOO_SOCKET_IFNAME=nonexistent0"
    ] is False
    last = next(ln for ln in doc["launches"] if ln["label"] == "static-best")
    assert last["phase"] == "measure" and last["rank0_env"].get("NCCL_PROTO") == sb["settings"].get(
        "NCCL_PROTO"
    )
    oracle_envs = [
        ln["rank0_env"] for ln in doc["launches"] if ln["mode"] == "oracle" and ln["phase"] == "sweep"
    ]
    assert [e["AUTOCCL_FIXED"] for e in oracle_envs] == [
        "allgather:ring/ll/8;allreduce:ring/ll/8",
        "allreduce:tree/ll/8",
    ]
    assert all(e["AUTOCCL_MODE"] == "fixed" for e in oracle_envs)
    online = next(ln for ln in doc["launches"] if ln["mode"] == "online")
    assert online["rank0_env"]["AUTOCCL_MODE"] == "online" and "AUTOCCL_TRACE" in online["rank0_env"]
    # the ceiling widens the communicators, the cap keeps NCCL's own choice at a plain one's count
    assert online["rank0_env"]["NCCL_MIN_CTAS"] == online["rank0_env"]["AUTOCCL_MAX_CHANNELS"] == "32"
    assert online["rank0_env"]["AUTOCCL_NCCL_CHANNELS"] == "12"
    assert doc["settings"]["online_nccl_channels"] == 12
    assert online["convergence"] == []  # gloo never loads the plugin: no trace
    # ... but the folder of the trace prefix exists, since the plugin creates none (under NCCL, a missing
    # folder silently cost the smoke run on 4 x H200 every convergence trace)
    assert Path(online["rank0_env"]["AUTOCCL_TRACE"]).parent.is_dir()
    traces = doc["warmup_traces"]
    assert {(t["coll"], t["launch"]) for t in traces} == {
        ("all_gather", "online@none"),
        ("all_reduce", "online@none"),
    }
    assert all(len(t["iter_us"]) == 3 for t in traces)
    summary = R.summary_rows(doc)
    assert {r["mode"] for r in summary} == {"static-best", "oracle", "online"}
    oracle = [r for r in summary if r["mode"] == "oracle"]
    assert len(oracle) == 2 and {r["phase"] for r in oracle} == {"measure"}  # the re-measured picks
    # a later command reuses the sweep: only the re-measurement runs
    prefix2 = tmp_path / "s2"
    r2 = _run(
        [
            "bench",
            "coll",
            *CPU,
            "--colls",
            "ag,ar",
            "--sizes",
            "8K",
            "--dtype",
            "fp32",
            "--modes",
            "static-best",
            "-w",
            "1",
            "-n",
            "2",
            "-r",
            "1",
            "--static-best-from",
            str(prefix.with_suffix(".json")),
            "-o",
            str(prefix2),
        ]
    )
    assert r2.exit_code == 0, r2.output
    doc2 = R.load_doc(prefix2.with_suffix(".json"))
    assert [ln["label"] for ln in doc2["launches"]] == ["static-best"]
    assert doc2["static_best"]["selected"] == sb["selected"]


def test_train_fsdp2_and_ddp(tmp_path: Path) -> None:
    """Without --preset a CPU run trains the tiny model (350m, the GPU default, outgrows a CPU machine)."""
    prefix = tmp_path / "t"
    r = _run(
        [
            "bench",
            "train",
            *CPU,
            "--seq",
            "16",
            "--batch",
            "2",
            "-n",
            "3",
            "--modes",
            "nccl",
            "--dtype",
            "fp32",
            "-o",
            str(prefix),
        ]
    )
    assert r.exit_code == 0, r.output
    assert "--preset tiny (the default with --device cpu)" in r.output, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    assert [it["launch"] for it in doc["iterations"]] == ["fsdp2/nccl", "ddp/nccl"]
    for it, row in zip(doc["iterations"], doc["train"], strict=True):
        assert len(it["iter_ms"]) == 3 and all(t > 0 for t in it["iter_ms"])
        assert row["params"] == PRESETS["tiny"].params()
        assert row["loss_first"] > 0
    assert "| ddp | nccl |" in prefix.with_suffix(".md").read_text()


TRAIN_DDP = "bench train --preset tiny --parallel ddp --modes nccl --dtype fp32 --seq 16 --batch 2".split()


def test_train_pairs_run_rounds_and_summarise(tmp_path: Path) -> None:
    """--pairs 2: two rounds of the modes' launches, each written as PREFIX-pairK, then their summary as
    launch pairs in PREFIX.pairs/ (a gloo run says so: both launches of a pair ran the same collectives)."""
    prefix = tmp_path / "t"
    base = ["bench", "train", *CPU, "--preset", "tiny", "--parallel", "ddp", "--dtype", "fp32", "--seq", "16"]
    base += ["--batch", "2", "--pairs", "2"]
    pair = [*base, "--modes", "nccl,online", "-n", "4", "-o", str(prefix)]
    r = _run(pair)
    assert r.exit_code == 0, r.output
    # the second round launches the modes in reverse order, and the summary knows which went first
    for k, order in ((1, ["ddp/nccl", "ddp/online"]), (2, ["ddp/online", "ddp/nccl"])):
        doc = R.load_doc(tmp_path / f"t-pair{k}.json")
        assert [it["launch"] for it in doc["iterations"]] == order
    summary = json.loads((tmp_path / "t.pairs" / "summary.json").read_text())
    ddp = summary["parallels"]["ddp"]
    assert [p["pair"] for p in ddp["pairs"]] == ["t-pair1", "t-pair2"]
    assert [p["first"] for p in ddp["pairs"]] == ["nccl", "online"]
    assert all(p["speed_ratio"] > 0 for p in ddp["pairs"])
    assert (tmp_path / "t.pairs" / "steps.png").stat().st_size > 0
    assert "gloo, not NCCL" in (tmp_path / "t.pairs" / "summary.md").read_text().splitlines()[0]
    assert not (tmp_path / "t.json").exists()  # the rounds, not a file of their own
    # --resume: the round that finished is continued (nothing launched again), the one that is gone runs anew
    (tmp_path / "t-pair2.json").unlink()
    r = _run([*pair, "--resume"])
    assert r.exit_code == 0, r.output
    first, second = (R.load_doc(tmp_path / f"t-pair{k}.json")["launches"] for k in (1, 2))
    assert len(first) == len(second) == 2
    assert all(x.get("resumed") for x in first) and not any(x.get("resumed") for x in second)
    r = CliRunner().invoke(main, [*base, "--modes", "nccl,online", "-o", str(tmp_path / "none"), "--resume"])
    assert r.exit_code != 0 and "nothing to continue" in r.output
    # rounds without a plain/online pair stand on their own: written, not summarised, not an error
    r = _run([*base, "--modes", "nccl", "-n", "3", "-o", str(tmp_path / "plain")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "plain-pair2.json").is_file() and not (tmp_path / "plain.pairs").exists()
    # plain NCCL against online with the step guard's arms: summarised in PREFIX.pairs-online-arms
    r = _run([*base, "--modes", "nccl,online-arms", "-n", "3", "-o", str(tmp_path / "arms")])
    assert r.exit_code == 0, r.output
    arms = json.loads((tmp_path / "arms.pairs-online-arms" / "summary.json").read_text())
    assert [p["first"] for p in arms["parallels"]["ddp"]["pairs"]] == ["nccl", "online-arms"]
    assert not (tmp_path / "arms.pairs").exists()
    assert R.load_doc(tmp_path / "arms-pair1.json")["settings"]["step_arms"] == "hidden=2,8"


def test_train_online_setting_reaches_the_online_launches_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--online-setting AUTOCCL_VAR=VAL is in the online launch's environment and no other; the shell's own
    AUTOCCL_* variables reach neither (the plain launch is plain NCCL)."""
    prefix = tmp_path / "t"
    args = ["bench", "train", *CPU, "--preset", "tiny", "--parallel", "ddp", "--dtype", "fp32", "--seq", "16"]
    args += ["--batch", "2", "-n", "3", "--modes", "nccl,online", "-o", str(prefix)]
    monkeypatch.setenv("AUTOCCL_GUARD", "off")
    r = _run([*args, "--online-setting", "AUTOCCL_EXPOSURE_EVERY=8"])
    assert r.exit_code == 0, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    env = {ln["mode"]: ln["rank0_env"] for ln in doc["launches"]}
    assert env["online"].get("AUTOCCL_EXPOSURE_EVERY") == "8", env["online"]
    assert "AUTOCCL_EXPOSURE_EVERY" not in env["nccl"]
    assert "AUTOCCL_GUARD" not in env["online"] and "AUTOCCL_GUARD" not in env["nccl"]
    assert doc["settings"]["online_settings"] == {"AUTOCCL_EXPOSURE_EVERY": "8"}
    # no online mode to give it to: said, not silently dropped
    plain = [a if a != "nccl,online" else "nccl" for a in args[:-1]] + [str(tmp_path / "p")]
    r = _run([*plain, "--online-setting", "AUTOCCL_EXPOSURE_EVERY=8"])
    assert r.exit_code == 0 and "--online-setting applies to online modes only" in r.output, r.output


def test_train_resilience_straggler(tmp_path: Path) -> None:
    """--resilience both with a straggler: four launches (sync / resilient, injected / clean), per-step
    loss and time, the same weights on every rank, the resilience table and the curves."""
    prefix = tmp_path / "s"
    args = [*TRAIN_DDP, *CPU, "-n", "16", "--data", "markov", "--lr", "2e-3", "--resilience", "both"]
    r = _run([*args, "--straggler", "1:0.5:3", "--delay", "sleep", "-o", str(prefix)])
    assert r.exit_code == 0, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    labels = ["ddp/nccl/sync", "ddp/nccl/resilient", "ddp/nccl/sync/clean", "ddp/nccl/resilient/clean"]
    assert [row["launch"] for row in doc["train"]] == labels
    for it, row in zip(doc["iterations"], doc["train"], strict=True):
        assert len(it["iter_ms"]) == 16 and len(it["loss"]) == 16
        assert row["weights_identical"] and row["eval_loss"] > row["loss_floor"] > 0
        assert (row.get("resilience") or {}).get("rounds") == (16 if row["resilient"] else None)
    sync, clean = doc["train"][0], doc["train"][2]
    assert sync["eval_loss"] == clean["eval_loss"]  # a delay changes no synchronous result
    md = prefix.with_suffix(".md").read_text()
    assert "## resilience" in md and "| ddp/nccl/resilient |" in md
    assert prefix.with_name("s.curves.png").stat().st_size > 0


def test_train_resilience_step_stall_writes_stacks(tmp_path: Path) -> None:
    """A resilience run's step longer than --stall-report-s writes every thread's stack to the rank's log
    (faulthandler): at 1 ms every step is one."""
    prefix = tmp_path / "stall"
    args = [*TRAIN_DDP, *CPU, "-n", "6", "--resilience", "on", "--stall-report-s", "0.001", "-o", str(prefix)]
    r = _run(args)
    assert r.exit_code == 0, r.output
    for log in prefix.with_suffix(".logs").glob("*/rank*.log"):
        text = log.read_text()
        assert "most recent call first" in text and "train.py" in text, text[-2000:]


def test_train_resilience_lost_rank(tmp_path: Path) -> None:
    """--kill: the killed rank's launch still succeeds, the survivors finish every step."""
    prefix = tmp_path / "k"
    cpu3 = "--device cpu --backend gloo --nproc 3 --no-progress --timeout 300".split()
    args = [*TRAIN_DDP, *cpu3, "-n", "14", "--resilience", "on", "--kill", "2:8", "--no-clean-baseline"]
    r = _run([*args, "-o", str(prefix)])
    assert r.exit_code == 0, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    (row,) = doc["train"]
    assert row["live_ranks"] == [0, 1] and row["weights_identical"]
    (rec,) = row["resilience"]["recoveries"]
    assert rec["lost"] == [2] and rec["survivors"] == [0, 1]
    assert len(doc["iterations"][0]["iter_ms"]) == 14


def test_train_resilience_replacement_joins(tmp_path: Path) -> None:
    """--kill --rejoin: the harness starts a replacement for the killed rank, which joins the run; the
    survivors' recovery does not wait for the old process though the new one beats under the same rank
    (census_s is 90 s: a census that took the newcomer's heartbeat for the lost process's waited so long)."""
    prefix = tmp_path / "j"
    cpu3 = "--device cpu --backend gloo --nproc 3 --no-progress --timeout 300".split()
    # 992 steps after the kill: the replacement starts and asks before the run ends on a loaded machine too
    # (at 200 steps it came after the end once on CI and stopped with RunEnded)
    args = [
        *TRAIN_DDP,
        *cpu3,
        "-n",
        "1000",
        "--resilience",
        "on",
        "--kill",
        "2:8",
        "--rejoin",
        "--no-clean-baseline",
    ]
    r = _run([*args, "-o", str(prefix)])
    assert r.exit_code == 0, r.output
    doc = R.load_doc(prefix.with_suffix(".json"))
    (row,) = doc["train"]
    assert row["live_ranks"] == [0, 1, 2] and row["weights_identical"]
    (rec,) = row["resilience"]["recoveries"]
    assert rec["lost"] == [2] and rec["seconds"] < 30, rec
    (join,) = row["resilience"]["joins"]
    assert join["joined"] == [2] and 8 < join["round"] < 1000
    assert f"2 back at step {join['round']}" in prefix.with_suffix(".md").read_text()
    assert len(doc["iterations"][0]["iter_ms"]) == 1000


def test_rejoin_needs_a_kill() -> None:
    r = _run([*TRAIN_DDP, "--device", "cpu", "--nproc", "2", "--resilience", "on", "--rejoin"])
    assert r.exit_code != 0 and "--rejoin needs --kill" in r.output


def test_rejoin_without_a_kill_is_refused_whatever_the_resilience(tmp_path: Path) -> None:
    """--rejoin replaces a killed rank: without --kill it is refused, with or without --resilience."""
    for extra in ([], ["--resilience", "off"], ["--resilience", "both"]):
        r = _run([*TRAIN_DDP, *CPU, "-n", "3", *extra, "--rejoin", "-o", str(tmp_path / "t")])
        assert r.exit_code == 1 and "--rejoin needs --kill" in r.output, (extra, r.output)
        assert not (tmp_path / "t.json").exists()


def test_results_are_not_overwritten_without_force(tmp_path: Path) -> None:
    """-o PREFIX of an earlier run: refused in one sentence naming the file, unless --force (or --resume);
    a dry run writes nothing and is not refused."""
    prefix = tmp_path / "r"
    coll = ["bench", "coll", *CPU, "--sizes", "4K", "--colls", "all_reduce", "-w", "1", "-n", "1", "-r", "1"]
    r = _run([*coll, "-o", str(prefix)])
    assert r.exit_code == 0, r.output
    first = prefix.with_suffix(".json").read_text()
    r = CliRunner().invoke(main, [*coll, "-o", str(prefix)])
    assert r.exit_code == 1, r.output
    assert r.output == (
        f"Error: {prefix}.json exists (an earlier run's result): choose another -o, continue it with "
        "--resume, or pass --force to replace it\n"
    )
    assert prefix.with_suffix(".json").read_text() == first
    r = _run([*coll, "--dry-run", "-o", str(prefix)])
    assert r.exit_code == 0 and "estimated duration" in r.output, r.output
    r = _run([*coll, "--force", "-o", str(prefix)])
    assert r.exit_code == 0, r.output
    assert prefix.with_suffix(".json").read_text() != first
    # train: any of PREFIX.json/.csv/.md, and with --pairs each round's files; refused before any launch
    train = [*TRAIN_DDP, *CPU, "-n", "3"]
    (tmp_path / "t.md").write_text("earlier")
    r = CliRunner().invoke(main, [*train, "-o", str(tmp_path / "t")])
    assert r.exit_code == 1 and f"Error: {tmp_path / 't.md'} exists" in r.output, r.output
    (tmp_path / "p-pair2.csv").write_text("earlier")
    r = CliRunner().invoke(main, [*train, "--pairs", "2", "-o", str(tmp_path / "p")])
    assert r.exit_code == 1 and f"Error: {tmp_path / 'p-pair2.csv'} exists" in r.output, r.output
    assert not (tmp_path / "p-pair1.json").exists()
    assert (tmp_path / "t.md").read_text() == "earlier"
    r = _run([*train, "--force", "-o", str(tmp_path / "t")])
    assert r.exit_code == 0, r.output
    assert "| ddp | nccl |" in (tmp_path / "t.md").read_text()
    # --resume with --force: one continues the run, the other replaces it; refused before anything runs
    kept = (tmp_path / "t.json").read_text()
    for cmd in ([*train, "-o", str(tmp_path / "t")], [*coll, "-o", str(prefix)]):
        r = CliRunner().invoke(main, [*cmd, "--resume", "--force"])
        assert r.exit_code == 1 and "give one of them" in r.output, r.output
    assert (tmp_path / "t.json").read_text() == kept


def test_gloo_runs_do_not_ask_for_nccls_channels(tmp_path: Path) -> None:
    """Online mode's default channels ask NCCL (or say why they cannot): on gloo, which loads neither NCCL nor
    the plugin, nothing is said."""
    r = _run(["bench", "coll", *CPU, "--modes", "nccl,online", "--sizes", "4K", "--dry-run"])
    assert r.exit_code == 0, r.output
    assert "NVIDIA driver" not in r.output and "channel" not in r.output, r.output
    # bench train sets the channels before it looks at -o: an earlier result stops it right after
    (tmp_path / "t.json").write_text("{}")
    r = CliRunner().invoke(main, [*TRAIN_DDP, *CPU, "--modes", "nccl,online", "-o", str(tmp_path / "t")])
    assert r.exit_code == 1 and "t.json exists" in r.output, r.output
    assert "NVIDIA driver" not in r.output and "channel" not in r.output, r.output


def test_agent_stream_needs_the_reducer() -> None:
    r = _run([*TRAIN_DDP, "--device", "cpu", "--nproc", "2", "--agent-stream"])
    assert r.exit_code != 0 and "--agent-stream needs --resilience on or both" in r.output


def test_agent_stream_reaches_the_reducers_config() -> None:
    from autoccl.cli.bench import Resilience

    def extra(agent_stream: bool) -> dict[str, Any]:
        opts = Resilience("on", "1:0.2:2-5", None, False, "sleep", True, 20.0, agent_stream)
        return opts.extra(["ddp"], world=2, distributed=False, iters=50)

    assert extra(True)["resilience_config"] == {"agent_stream": True}
    assert extra(False)["resilience_config"] == {"agent_stream": False}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--colls", "allgatherv"], "unknown collective"),
        (["--nproc", "3", "--sizes", "4K"], "not divisible by world size 3"),
        (["--modes", "fastest"], "unknown mode"),
        (["--load", "medium"], "bad load"),
        (["--iters", "0"], "--iters must be >= 1"),
        (["--sizes", "1G:1M"], "end is smaller"),
    ],
)
def test_coll_argument_errors(args: list[str], message: str) -> None:
    r = _run(["bench", "coll", "--device", "cpu", "--no-progress", *args])
    assert r.exit_code != 0 and message in r.output


def test_no_gpus_is_a_clear_error() -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("GPUs visible")
    r = _run(["bench", "coll", "--sizes", "1M"])
    assert r.exit_code != 0 and "no CUDA GPUs visible" in r.output
    r = _run(["bench", "train", "--device", "cpu", "--backend", "nccl"])
    assert r.exit_code != 0 and "--backend nccl needs --device cuda" in r.output


def test_dry_run_prints_plan_and_estimate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")  # stand-in: a dry run only plans
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    r = _run(
        [
            "bench",
            "coll",
            "--dry-run",
            "--nproc",
            "4",
            "--modes",
            "nccl,oracle,static-best",
            "--load",
            "none,light",
        ]
    )
    assert r.exit_code == 0, r.output
    assert "estimated duration" in r.output and "oracle/029" in r.output and "oracle/030" not in r.output
    # AR: 2 algos x 3 protos x channel counts (default auto,8,16,32,64: 30 launches; auto,16: 12)
    r = _run(
        ["bench", "coll", "--dry-run", "--nproc", "4", "--modes", "oracle", "--oracle-channels", "auto,16"]
    )
    assert "oracle/011" in r.output and "oracle/012" not in r.output


def test_detect_topology() -> None:
    t = detect_topology(4, {})
    assert (t.distributed, t.world_size, t.rank) == (False, 4, 0)
    t = detect_topology(
        None,
        {
            "WORLD_SIZE": "16",
            "RANK": "9",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "8",
            "MASTER_ADDR": "h0",
            "MASTER_PORT": "29400",
        },
    )
    assert (t.distributed, t.world_size, t.rank, t.local_rank, t.master_port, t.is_main) == (
        True,
        16,
        9,
        1,
        29400,
        False,
    )
    t = detect_topology(
        None,
        {
            "SLURM_NTASKS": "8",
            "SLURM_PROCID": "0",
            "SLURM_LOCALID": "0",
            "SLURM_NTASKS_PER_NODE": "4(x2)",
            "MASTER_ADDR": "h0",
        },
    )
    assert (t.world_size, t.local_world_size, t.is_main) == (8, 4, True)
    with pytest.raises(LaunchError, match="MASTER_ADDR"):
        detect_topology(None, {"SLURM_NTASKS": "8", "SLURM_PROCID": "0"})
    with pytest.raises(LaunchError, match="conflicts"):
        detect_topology(2, {"WORLD_SIZE": "8", "RANK": "0", "LOCAL_WORLD_SIZE": "8"})


def test_a_worker_ended_by_a_signal_is_named() -> None:
    from autoccl.bench.launch import signal_note

    assert signal_note(1) == "" and signal_note(0) == ""
    assert "SIGKILL" in signal_note(-9) and "out of memory" in signal_note(-9)
    assert signal_note(-15) == " (killed by SIGTERM)"
    assert signal_note(-200) == " (killed by signal 200)"


def test_failing_worker_reports_its_log(tmp_path: Path) -> None:
    topo = Topology(False, 2, 0, 0, 2, "127.0.0.1", 0)
    spec = {"kind": "nonsense", "device": "cpu", "backend": "gloo"}
    with pytest.raises(LaunchError, match=r"(?s)rank \d exited with status 1.*unknown kind 'nonsense'") as e:
        run_launch(topo, 0, spec, dict(os.environ), tmp_path, timeout_s=60)
    assert "rank" in str(e.value)
    assert json.loads((tmp_path / "spec.0.json").read_text())["kind"] == "nonsense"


def _train_on_two_torchrun_hosts(tmp_path: Path, args: list[str], timeout_s: float) -> dict[str, Any]:
    """`autoccl bench train ARGS` the multi-host way (docs/bench.md): each "host" runs the harness under
    `torchrun --nnodes 2`, and each harness starts one worker per launch. Returns host 0's result."""
    import signal
    import subprocess
    import sys

    from autoccl.tuner_env import free_local_port

    port = free_local_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC_", "MASTER_"))}
    hosts = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--node-rank", str(node)]
        cmd += ["--nproc-per-node", "1", "--master-addr", "127.0.0.1", "--master-port", str(port)]
        cmd += ["-m", "autoccl", "bench", "train", "--preset", "tiny", "--parallel", "ddp", "--modes", "nccl"]
        cmd += ["--device", "cpu", "--backend", "gloo", "--seq", "64", "--no-progress", *args]
        cmd += ["-o", str(tmp_path / f"host{node}" / "run")]
        with (tmp_path / f"host{node}.log").open("w") as log:
            hosts.append(
                subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            )
    try:
        codes = [p.wait(timeout=timeout_s) for p in hosts]
    finally:
        for p in hosts:  # a hung host: its agent and the workers it started
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    assert codes == [0, 0], (tmp_path / "host0.log").read_text()[-3000:]
    assert not (tmp_path / "host1" / "run.json").exists()  # results are written by global rank 0
    doc: dict[str, Any] = json.loads((tmp_path / "host0" / "run.json").read_text())
    return doc


def test_train_under_torchrun_on_two_hosts(tmp_path: Path) -> None:
    """torchrun hands its processes TORCHELASTIC_USE_AGENT_STORE=True; a worker that inherited it did not
    serve the launch's store on MASTER_PORT + 1 + i, and both waited for it until the launch's timeout."""
    res = _train_on_two_torchrun_hosts(tmp_path, ["-n", "5"], timeout_s=240)
    assert [(r["parallel"], r["mode"]) for r in res["train"]] == [("ddp", "nccl")]
    assert [la["status"] for la in res["launches"]] == ["ok"]


@pytest.mark.serial
def test_rejoin_under_torchrun_on_two_hosts(tmp_path: Path) -> None:
    """--kill 1 --rejoin on two hosts: the harness of the host whose worker was killed starts the
    replacement, which joins host 0's survivor through the job's store (the harness of host 0 serves it)."""
    args = "-n 400 --resilience on --kill 1:10 --rejoin --no-clean-baseline --timeout 300".split()
    res = _train_on_two_torchrun_hosts(tmp_path, args, timeout_s=360)
    (row,) = res["train"]
    assert row["live_ranks"] == [0, 1] and row["weights_identical"]
    (rec,) = row["resilience"]["recoveries"]
    assert rec["lost"] == [1] and rec["survivors"] == [0] and rec["seconds"] < 30, rec
    (join,) = row["resilience"]["joins"]
    assert join["joined"] == [1] and 10 < join["round"] < 400
    assert (tmp_path / "host1" / "run.logs" / "000-ddp_nccl_resilient" / "rank1.newcomer.log").is_file()
