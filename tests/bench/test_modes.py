from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autoccl.bench import modes as M
from autoccl.bench.spec import SpecError
from autoccl.tuner_env import SAFETY_ENV


def test_parse_modes_static_settings_attach() -> None:
    ms = M.parse_modes(["oracle,static:NCCL_PROTO=LL128,NCCL_ALGO=Ring,nccl", "online"])
    assert [m.name for m in ms] == ["nccl", "oracle", "static:NCCL_PROTO=LL128,NCCL_ALGO=Ring", "online"]
    assert ms[2].settings == (("NCCL_PROTO", "LL128"), ("NCCL_ALGO", "Ring"))
    assert ms[1].needs_plugin and not ms[2].needs_plugin


def test_parse_modes_keeps_the_order_given_without_baseline_first() -> None:
    assert [m.name for m in M.parse_modes(["online,nccl"], baseline_first=False)] == ["online", "nccl"]
    assert [m.name for m in M.parse_modes(["online,nccl"])] == ["nccl", "online"]


@pytest.mark.parametrize(
    "text",
    ["fastest", "static", "static:PROTO", "static:NCCL_NVLS_ENABLE=1", "static:AUTOCCL_MODE=online", "x=1"],
)
def test_parse_modes_errors(text: str) -> None:
    with pytest.raises(SpecError):
        M.parse_modes([text])


def test_static_configs() -> None:
    space = M.parse_static_space("NCCL_PROTO=LL,Simple;CTAS=8,16,32")
    oat = M.static_configs(space, "oat")
    assert oat[0] == {} and len(oat) == 1 + 2 + 3
    assert {"NCCL_MIN_CTAS": "16", "NCCL_MAX_CTAS": "16"} in oat
    grid = M.static_configs(space, "grid")
    assert len(grid) == 3 * 4
    assert {"NCCL_PROTO": "LL", "NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "8"} in grid
    assert len(M.static_configs(M.parse_static_space(M.DEFAULT_STATIC_SPACE), "oat")) == 14
    assert (
        M.settings_label({"NCCL_MIN_CTAS": "8", "NCCL_MAX_CTAS": "8", "NCCL_PROTO": "LL"})
        == "CTAS=8,NCCL_PROTO=LL"
    )
    with pytest.raises(SpecError):
        M.static_configs(space, "random")
    with pytest.raises(SpecError):
        M.parse_static_space("NCCL_PROTO")


def test_oracle_configs_cover_each_collective_space() -> None:
    chans = M.parse_channels("auto,8,32")
    cfgs = M.oracle_configs(["all_gather", "all_reduce", "all_to_all"], chans)
    # all_reduce: 2 algos x 3 protos x 3 channel counts; all_gather: 1 x 3 x 3; all_to_all: not tuned
    assert len(cfgs) == 18
    ar = {c["all_reduce"] for c in cfgs}
    ag = {c["all_gather"] for c in cfgs if "all_gather" in c}
    assert len(ar) == 18 and len(ag) == 9
    assert "tree/ll128/32" in ar and "ring/simple" in ag
    assert all("all_to_all" not in c for c in cfgs)
    assert M.fixed_rules(cfgs[0]) == "allgather:ring/ll;allreduce:ring/ll"
    assert M.oracle_configs(["all_to_all"], chans) == []
    with pytest.raises(SpecError):
        M.parse_channels("8,zero")


def test_launch_env_is_plain_nccl_plus_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    base = {"PATH": "/bin", "AUTOCCL_MODE": "online", "NCCL_TUNER_PLUGIN": "/x.so", "NCCL_PROTO": "LL"}
    ln = M.Launch("static:NCCL_ALGO=Ring", "s", "measure", M.static_env({"NCCL_ALGO": "Ring"}))
    env = ln.child_env(base)
    assert "AUTOCCL_MODE" not in env and "NCCL_TUNER_PLUGIN" not in env
    assert env["NCCL_ALGO"] == "Ring" and env["PATH"] == "/bin"
    for k, v in SAFETY_ENV.items():
        assert env[k] == v


def test_plugin_modes_need_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from autoccl.bench import runner
    from autoccl.bench.spec import parse_loads

    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))  # an empty dir: no plugin there
    o = runner.CollOptions(
        colls=["all_gather"],
        sizes=[4096],
        dtype="fp32",
        loads=parse_loads("none"),
        modes=M.parse_modes(["nccl,online"]),
        device="cpu",
        backend="gloo",
    )
    if _plugin_in_package():
        pytest.skip("a built plugin is installed in the package")
    with pytest.raises(SpecError, match="needs the autoccl plugin"):
        runner.plan_coll(o, tmp_path)
    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")
    launches = runner.plan_coll(o, tmp_path / "w")
    online = [ln for ln in launches if ln.mode == "online"]
    assert len(online) == 1 and online[0].env["AUTOCCL_MODE"] == "online"
    assert online[0].env["AUTOCCL_TRACE"] == online[0].trace_prefix


def _plugin_in_package() -> bool:
    import autoccl

    return (Path(autoccl.__file__).parent / "lib" / "libautoccl-nccl.so").is_file()


def test_channel_ceiling_envs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced or tuned channel counts above NCCL's default need communicators created that wide."""
    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    plain = M.online_env("t", "c")
    assert "NCCL_MIN_CTAS" not in plain and "AUTOCCL_MAX_CHANNELS" not in plain
    wide = M.online_env("t", "c", 64)
    assert wide["NCCL_MIN_CTAS"] == wide["NCCL_MAX_CTAS"] == wide["AUTOCCL_MAX_CHANNELS"] == "64"
    assert "AUTOCCL_NCCL_CHANNELS" not in wide
    capped = M.online_env("t", "c", 64, 24)
    assert capped["NCCL_MIN_CTAS"] == "64" and capped["AUTOCCL_NCCL_CHANNELS"] == "24"
    assert M.rule_channels("ring/ll/16") == 16 and M.rule_channels("tree/simple") is None
    assert M.rule_channels("ring/ll/16/chunk=64K") == 16 and M.rule_channels("ring/ll/x") is None
    forced = M.oracle_env({"all_reduce": "tree/ll/64", "all_gather": "ring/simple/32"})
    assert forced["NCCL_MIN_CTAS"] == forced["NCCL_MAX_CTAS"] == "64"
    auto = M.oracle_env({"all_reduce": "ring/ll128"})
    assert "NCCL_MIN_CTAS" not in auto and auto["AUTOCCL_FIXED"] == "allreduce:ring/ll128"


def test_manual_mode_launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`manual` (the resource-sharing study's policy) is a plugin mode of `bench train`: its launch sets
    AUTOCCL_MODE=manual with the channel split, on communicators as wide as the ceiling; `bench coll`
    refuses it (a collective repeated alone has one call per iteration, nothing to hide)."""
    from autoccl.bench import runner

    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    ms = M.parse_modes(["nccl,manual"])
    assert [m.name for m in ms] == ["nccl", "manual"] and ms[1].needs_plugin
    env = M.manual_env("4,max", 64, 24)
    assert env["AUTOCCL_MODE"] == "manual" and env["AUTOCCL_MANUAL_CHANNELS"] == "4,max"
    assert (
        env["NCCL_MIN_CTAS"] == env["AUTOCCL_MAX_CHANNELS"] == "64" and env["AUTOCCL_NCCL_CHANNELS"] == "24"
    )
    assert "NCCL_MIN_CTAS" not in M.manual_env("2,max")
    o = runner.TrainOptions(
        preset="tiny", parallel=["ddp"], modes=ms, device="cpu", backend="gloo", manual_channels="4,16"
    )
    launches = runner.plan_train(o, tmp_path / "w")
    manual = next(ln for ln in launches if ln.mode == "manual")
    assert manual.label == "ddp/manual" and manual.env["AUTOCCL_MANUAL_CHANNELS"] == "4,16"
    assert manual.config == "AUTOCCL_MANUAL_CHANNELS=4,16"
    co = runner.CollOptions(["all_reduce"], [1 << 20], "fp32", [], ms, device="cpu", backend="gloo")
    with pytest.raises(SpecError, match="bench train"):
        runner.plan_coll(co, tmp_path / "c")


def test_online_arms_mode_launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`online-arms` is online with the step guard's channel arms: its launch alone carries
    AUTOCCL_STEP_ARMS (the launches' environments drop every inherited AUTOCCL_* variable, so nothing else
    could set it), with a trace and cache of its own; `bench coll` refuses it like manual."""
    from autoccl.bench import runner

    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    monkeypatch.setenv("AUTOCCL_STEP_ARMS", "hidden=4")  # the user's shell: must not reach any launch
    ms = M.parse_modes(["nccl,online,online-arms"], baseline_first=False)
    assert [m.name for m in ms] == ["nccl", "online", "online-arms"] and ms[2].needs_plugin
    o = runner.TrainOptions(
        preset="tiny", parallel=["ddp"], modes=ms, device="cpu", backend="gloo", step_arms="hidden=2,16"
    )
    launches = {ln.label: ln for ln in runner.plan_train(o, tmp_path / "w")}
    arms, online = launches["ddp/online-arms"], launches["ddp/online"]
    assert arms.mode == "online-arms" and arms.config == "AUTOCCL_STEP_ARMS=hidden=2,16"
    assert arms.child_env()["AUTOCCL_STEP_ARMS"] == "hidden=2,16"
    assert (
        "AUTOCCL_STEP_ARMS" not in online.child_env()
        and "AUTOCCL_STEP_ARMS" not in launches["ddp/nccl"].child_env()
    )
    assert arms.trace_prefix and online.trace_prefix and arms.trace_prefix != online.trace_prefix
    assert arms.env["AUTOCCL_MODE"] == online.env["AUTOCCL_MODE"] == "online"
    co = runner.CollOptions(["all_reduce"], [1 << 20], "fp32", [], ms, device="cpu", backend="gloo")
    with pytest.raises(SpecError, match="bench train"):
        runner.plan_coll(co, tmp_path / "c")


def test_oracle_cells_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The re-measurement forces each cell's rule at its own size only; a cell picked from a launch that
    left its collective to NCCL keeps NCCL's choice; no rule at all: observe (NCCL's choice, timed)."""
    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    cells = [
        {"coll": "all_gather", "bytes": 1 << 20, "rule": "ring/ll/8"},
        {"coll": "all_gather", "bytes": 64 << 20, "rule": None},
        {"coll": "all_reduce", "bytes": 64 << 20, "rule": "tree/simple/32"},
    ]
    env = M.oracle_cells_env(cells, 64)
    assert env["AUTOCCL_MODE"] == "fixed"
    assert (
        env["AUTOCCL_FIXED"]
        == "allgather@1048576-1048576:ring/ll/8;allreduce@67108864-67108864:tree/simple/32"
    )
    assert env["NCCL_MIN_CTAS"] == env["NCCL_MAX_CTAS"] == "64"  # the sweep launch's width, not the rules'
    assert "NCCL_MIN_CTAS" not in M.oracle_cells_env(cells)
    assert M.oracle_cells_env(cells[1:2])["AUTOCCL_MODE"] == "observe"


def test_table_mode_launches_from_the_rounds_online_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`table` is `bench train`'s second start: table mode reading the cache the same round's online launch
    of the same parallel kind wrote, on the same communicators, traced (the guard's verdicts); it needs
    online in the modes, runs after it in either order of a round, and `bench coll` does not take it."""
    from autoccl.bench import runner

    (tmp_path / "libautoccl-nccl.so").write_bytes(b"")
    monkeypatch.setenv("AUTOCCL_LIB_DIR", str(tmp_path))
    ms = M.parse_modes(["nccl,online,table"], baseline_first=False, kinds=M.TRAIN_MODE_KINDS)
    assert [m.name for m in ms] == ["nccl", "online", "table"] and ms[2].needs_plugin
    o = runner.TrainOptions(preset="tiny", parallel=["ddp", "fsdp2"], modes=ms, device="cpu", backend="gloo")
    o = replace(o, online_channel_ceiling=64, online_nccl_channels=24)
    launches = {ln.label: ln for ln in runner.plan_train(o, tmp_path / "w")}
    for par in ("ddp", "fsdp2"):
        table, online = launches[f"{par}/table"], launches[f"{par}/online"]
        assert table.env["AUTOCCL_MODE"] == "table"
        assert (
            table.env["AUTOCCL_CACHE_DIR"]
            == online.env["AUTOCCL_CACHE_DIR"]
            == str(tmp_path / "w" / f"online-{par}" / "cache")
        )
        for var in ("NCCL_MIN_CTAS", "NCCL_MAX_CTAS", "AUTOCCL_MAX_CHANNELS", "AUTOCCL_NCCL_CHANNELS"):
            assert table.env[var] == online.env[var], var
        assert table.trace_prefix and table.trace_prefix != online.trace_prefix
        assert "AUTOCCL_RUN_ADDR" in table.env  # its step guard decides through a coordinator
    # a round in reverse order still starts table mode after the online launch it reads
    assert [m.name for m in M.round_order(ms, reverse=True)] == ["online", "table", "nccl"]
    assert [m.name for m in M.round_order(ms, reverse=False)] == ["nccl", "online", "table"]
    alone = M.parse_modes(["nccl,table"], baseline_first=False, kinds=M.TRAIN_MODE_KINDS)
    with pytest.raises(SpecError, match="list online too"):
        runner.plan_train(replace(o, modes=alone), tmp_path / "x")
    with pytest.raises(SpecError, match="unknown mode"):
        M.parse_modes(["nccl,table"])  # bench coll's modes
