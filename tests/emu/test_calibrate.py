"""The calibration's chunk fit: probe tables parsed as benchmarks/results/h200x2/nccl-2.30-chunk-size/probe/
chunk_probe.md has them, and the chunk terms recovered from ratios a known model produces
(whatever its absolute level)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from autoccl.emu.calibrate import fit_chunk, parse_chunk_probe
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
