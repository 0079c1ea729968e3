"""The calibration's chunk fit: probe tables parsed as benchmarks/results/h200x2/nccl-2.30-chunk-size/probe/
chunk_probe.md has them, and the chunk terms recovered from ratios a known model produces
(whatever its absolute level)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from autoccl.emu.calibrate import fit_chunk, fit_load, load_measurements, main, parse_chunk_probe
from autoccl.emu.model import PerfModel, default_chunk

SIZES = {"4M": 4 << 20, "16M": 16 << 20, "64M": 64 << 20, "256M": 256 << 20, "1G": 1 << 30}
CHUNKS = {"simple": (0, 1 << 20, 512 << 10, 256 << 10, 128 << 10), "ll128": (0, 288000, 144000)}


def probe_table(truth: PerfModel, nranks: int, level: float) -> str:
    """chunk_probe.md of `truth` on `nranks` GPUs, every busbw scaled by `level` (another machine's speed)."""
    out = []
    for coll, title in (
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("allreduce", "all_reduce"),
    ):
        out += [f"## {title}: busbw GB/s (x plain NCCL)", "", "| configuration | " + " | ".join(SIZES) + " |"]
        out.append("| --- | " + " | ".join("---:" for _ in SIZES) + " | ---: |")
        out.append("| plain | " + " | ".join("100.0" for _ in SIZES) + " | 0 |")
        for proto, chunks in CHUNKS.items():
            for chunk in chunks:
                cells = []
                for n in SIZES.values():
                    t = truth.mean_us(
                        coll, nranks, n, "ring", proto, 64, chunk or default_chunk(coll, "ring", proto), 0
                    )
                    busbw = level * n * PerfModel.bus_factor(coll, nranks) / (t * 1e3)
                    cells.append(f"{busbw:.1f} (1.000)")
                out.append(f"| ring_{proto}_64_chunk{chunk} | " + " | ".join(cells) + " | 0 |")
        out.append("")
    return "\n".join(out)


def test_fit_chunk_recovers_the_chunk_terms(tmp_path: Path) -> None:
    truth = PerfModel()
    for key in truth.paths:
        proto = key.split("/")[1]
        truth.paths[key] = replace(
            truth.paths[key],
            fill=0.3 if proto == "simple" else 0.2,
            chunk_overhead_us=1.5 if proto == "simple" else 0.4,
        )
    probe = tmp_path / "chunk_probe.md"
    probe.write_text(probe_table(truth, 2, level=0.8))
    ratios = parse_chunk_probe(probe, 2)
    assert len(ratios) == 3 * 5 * (4 + 2)  # colls x sizes x chunk rows other than NCCL's
    fitted = PerfModel()  # priors: fill 0.1, overhead 0.1
    result = fit_chunk(ratios, fitted)
    assert result["simple"]["fill"] == pytest.approx(0.3, rel=0.05)
    assert result["simple"]["chunk_overhead_us"] == pytest.approx(1.5, rel=0.1)
    assert result["ll128"]["fill"] == pytest.approx(0.2, rel=0.05)
    assert result["ll128"]["rms_log"] < 1e-3 < result["ll128"]["rms_log_before"]
    # applied to tree paths of the protocol too; LL (no probe rows) untouched
    assert fitted.paths["tree/simple"].fill == pytest.approx(0.3, rel=0.05)
    assert fitted.paths["ring/ll"] == PerfModel().paths["ring/ll"]


def test_chunk_probe_without_nccls_row_or_with_bad_sizes(tmp_path: Path) -> None:
    probe = tmp_path / "p.md"
    probe.write_text(probe_table(PerfModel(), 2, 1.0).replace("chunk0 |", "chunk999 |"))
    assert parse_chunk_probe(probe, 2) == []  # nothing to compare with: no ratio invented
    rows = probe_table(PerfModel(), 2, 1.0).splitlines()
    probe.write_text("\n".join(r[: -len("| 0 |")] + "| 3 |" if "chunk131072" in r else r for r in rows))
    ratios = parse_chunk_probe(probe, 2)
    assert ratios and all(r.chunk != 131072 for r in ratios)  # rows with data errors are left out
    probe.write_text(probe_table(PerfModel(), 2, 1.0).replace("| 16M |", "| 16 MiB |"))
    with pytest.raises(ValueError, match="16 MiB"):
        parse_chunk_probe(probe, 2)


def bench_coll_doc(truth: PerfModel, light: float, protos: tuple[str, ...] = ("simple",)) -> dict[str, Any]:
    """An `autoccl bench coll` result with an oracle sweep over channels (ring, each of `protos`), loads none,
    light and heavy, whose times and slowdowns `truth` produces (light GEMM = `light` of the heavy one), plus
    rows the calibration must skip: NCCL's own (configuration unknown) and a failed check."""
    channels = (8, 16, 32, 64)
    launches: list[dict[str, Any]] = [{"label": "nccl", "mode": "nccl", "params": {}}]
    rows: list[dict[str, Any]] = []
    for i, (proto, ch) in enumerate((p, c) for p in protos for c in channels):
        label = f"oracle/{i:03d}"
        rule = f"ring/{proto}/{ch}"
        launches.append({"label": label, "mode": "oracle", "params": {"rules": {"all_gather": rule}}})
        for nbytes in (16 << 20, 256 << 20):
            alone = truth.mean_us("allgather", 2, nbytes, "ring", proto, ch, 0, 0.0)
            base = {"coll": "all_gather", "bytes": nbytes, "world_size": 2, "mode": "oracle", "launch": label}
            rows.append({**base, "load": "none", "phase": "sweep", "time_us": alone})
            for load, level in (("light", light), ("heavy", 1.0)):
                loaded = truth.mean_us("allgather", 2, nbytes, "ring", proto, ch, 0, level)
                slow = truth.gemm_slowdown(ch, level, proto)
                row = {**base, "load": load, "phase": "sweep", "time_us": alone}
                rows.append({**row, "comm_slowdown": loaded / alone, "gemm_slowdown": slow})
    rows.append(
        {
            "coll": "all_gather",
            "bytes": 16 << 20,
            "mode": "nccl",
            "launch": "nccl",
            "load": "heavy",
            "phase": "measure",
            "time_us": 1.0,
            "comm_slowdown": 9.0,
            "gemm_slowdown": 9.0,
        }
    )
    rows.append(
        {
            "coll": "all_gather",
            "bytes": 1 << 20,
            "mode": "oracle",
            "launch": "oracle/000",
            "load": "none",
            "phase": "sweep",
            "time_us": 1.0,
            "check": "FAIL",
        }
    )
    return {"kind": "coll", "launches": launches, "rows": rows}


def test_bench_coll_oracle_rows_calibrate_the_contention_law(tmp_path: Path) -> None:
    truth = PerfModel()
    truth.load.update({"comm_slow": 0.6, "comm_slow_per_ch": 0.2, "gemm_base": 0.05, "gemm_per_ch": 0.5})
    path = tmp_path / "coll.json"
    path.write_text(json.dumps(bench_coll_doc(truth, light=0.4)))
    points, loads = load_measurements([path])
    assert len(points) == 4 * 2 and len(loads) == 4 * 2 * 2  # NCCL's rows and the failed check left out
    assert {(p.algo, p.proto, p.channels) for p in points} == {("ring", "simple", c) for c in (8, 16, 32, 64)}
    # the model slows only the bandwidth term, so comm_slowdown is not linear in channels at 16 MiB (latency):
    # the fit recovers the GEMM's law exactly and the collective's closely
    fitted = PerfModel()
    result = fit_load(loads, fitted)
    assert fitted.load["gemm_per_ch"] == pytest.approx(0.5, rel=0.02)
    assert fitted.load["gemm_base"] == pytest.approx(0.05, abs=0.005)
    assert result["light_level"] == pytest.approx(0.4, rel=0.05)
    assert result["gemm_mape_pct"] < 1.0
    assert result["comm_mape_pct"] < 5.0 and fitted.load["comm_slow"] == pytest.approx(0.6, rel=0.1)


def test_bench_coll_oracle_rows_calibrate_the_protocols_weights(tmp_path: Path) -> None:
    """Oracle rows of LL, LL128 and Simple under load (the contention plan's sweep): the fit recovers how
    much more a channel of each slows the GEMM than Simple's; with Simple's rows alone the weights are not
    touched."""
    truth = PerfModel()
    truth.load.update({"gemm_base": 0.05, "gemm_per_ch": 0.5, "gemm_proto_ll": 2.5, "gemm_proto_ll128": 1.6})
    path = tmp_path / "coll.json"
    path.write_text(json.dumps(bench_coll_doc(truth, light=0.4, protos=("ll", "ll128", "simple"))))
    _, loads = load_measurements([path])
    assert {lp.proto for lp in loads} == {"ll", "ll128", "simple"}
    fitted = PerfModel()
    result = fit_load(loads, fitted)
    assert fitted.load["gemm_proto_ll"] == pytest.approx(2.5, rel=0.02)
    assert fitted.load["gemm_proto_ll128"] == pytest.approx(1.6, rel=0.02)
    assert fitted.load["gemm_proto_simple"] == 1.0
    assert fitted.load["gemm_per_ch"] == pytest.approx(0.5, rel=0.02)
    assert result["gemm_proto_ll"] == pytest.approx(2.5, rel=0.02) and result["gemm_mape_pct"] < 1.0
    simple_only = PerfModel()
    simple_only.load["gemm_proto_ll"] = 3.0  # a start model's weight, which Simple's rows cannot see
    path.write_text(json.dumps(bench_coll_doc(truth, light=0.4)))
    result = fit_load(load_measurements([path])[1], simple_only)
    assert simple_only.load["gemm_proto_ll"] == 3.0 and "gemm_proto_ll" not in result
    # rows of one protocol, whose weight the start model sets: the written model predicts what was measured
    # (the fit scales gemm_per_ch under that weight, rather than fitting at 1 and applying the weight on top)
    for proto, start in (("simple", 0.5), ("ll", 3.0)):
        one = PerfModel()
        one.load[f"gemm_proto_{proto}"] = start
        path.write_text(json.dumps(bench_coll_doc(truth, light=0.4, protos=(proto,))))
        loads = load_measurements([path])[1]
        result = fit_load(loads, one)
        assert one.load[f"gemm_proto_{proto}"] == start and result["gemm_mape_pct"] < 1.0
        for lp in (x for x in loads if x.level == "heavy"):
            assert one.gemm_slowdown(lp.channels, 1.0, proto) == pytest.approx(lp.gemm_slow, rel=0.01)


def test_calibrate_refuses_json_that_is_not_a_coll_result(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "train.json"
    bad.write_text(json.dumps({"kind": "train", "rows": []}))
    assert main([str(bad), "-o", str(tmp_path / "m.json")]) == 2
    assert "not an `autoccl bench coll` result" in capsys.readouterr().err
    bad.write_text("{not json")
    assert main([str(bad), "-o", str(tmp_path / "m.json")]) == 2
    assert "not JSON" in capsys.readouterr().err
