"""benchmarks/busbw_summary.py: summary and plot of an online-vs-plain nccl-tests folder (synthetic rows)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "busbw_summary.py"
COLLS = ("allgather", "reducescatter", "allreduce")
MIB = (1, 4, 16, 64, 256, 1024)


def write_rows(path: Path, plan: str, busbw: dict[tuple[str, int], list[float]], wrong: int = 0) -> None:
    """Runs in file order as the cycles check writes them: per run and collective, every size of three passes
    (only the last pass carries the value under test), then the run's summary row."""
    runs = len(next(iter(busbw.values())))
    with path.open("w") as f:
        for run in range(runs):
            for coll in COLLS:
                for cycle in range(3):
                    for mib in MIB:
                        v = busbw[(coll, mib)][run] if cycle == 2 else 1.0
                        row = {
                            "plan": plan,
                            "launch": "mpi",
                            "coll": coll,
                            "bytes": mib << 20,
                            "cycle": cycle,
                        }
                        f.write(json.dumps(row | {"busbw_gbs": v}) + "\n")
                summary = {"plan": plan, "launch": "mpi", "summary": True, "ok": True, "wrong": wrong}
                summary["trace"] = {"calls_compared": 10, "divergent_calls": 0}
                f.write(json.dumps(summary) + "\n")


def test_ratio_per_cell_run_spread_and_checks(tmp_path: Path) -> None:
    plain = {(c, m): [100.0, 100.0] for c in COLLS for m in MIB}
    online = {(c, m): [110.0, 130.0] for c in COLLS for m in MIB}  # medians 120: 1.2x
    online[("allreduce", 4)] = [90.0, 90.0]  # the worst target cell
    online[("allgather", 1)] = [10.0, 10.0]  # 1 MiB is not a target cell
    write_rows(tmp_path / "mpi_plain.jsonl", "plain-long", plain)
    write_rows(tmp_path / "mpi_online.jsonl", "online", online, wrong=1)
    png = tmp_path / "ratio.png"
    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--png", str(png)], capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    s = json.loads((tmp_path / "summary.json").read_text())["mpi"]
    expected = math.exp((14 * math.log(1.2) + math.log(0.9)) / 15)
    assert abs(s["target_geomean"] - expected) < 1e-5
    assert s["target_min"] == 0.9 and s["target_min_cell"] == "allreduce 4 MiB"
    run1 = math.exp((14 * math.log(1.1) + math.log(0.9)) / 15)
    run2 = math.exp((14 * math.log(1.3) + math.log(0.9)) / 15)
    assert [round(v, 4) for v in s["per_run_geomean"]] == [round(run1, 4), round(run2, 4)]
    cell = next(c for c in s["cells"] if c["coll"] == "allgather" and c["bytes"] == 16 << 20)
    assert (cell["ratio_min"], cell["ratio"], cell["ratio_max"]) == (1.1, 1.2, 1.3)
    assert s["checks_online"] == {
        "runs": 6,
        "failed_runs": 0,
        "wrong": 6,
        "calls_compared": 60,
        "divergent_calls": 0,
    }
    assert png.stat().st_size > 0
    assert "mpi: target cells" in out.stdout


def test_folder_without_rows_is_one_clear_error(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert out.returncode == 1
    assert out.stderr.startswith("busbw_summary: no <launch>_online.jsonl") and "Traceback" not in out.stderr
