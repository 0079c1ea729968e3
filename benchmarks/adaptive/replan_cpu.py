"""Re-planning demonstration on the CPU: N gloo ranks on an emulated fully connected network (every directed
link its own latency and bandwidth, emulated in the sender), a link made K times slower mid-run.

    python benchmarks/adaptive/replan_cpu.py --out benchmarks/results/cpu/adaptive-replan

1. `autoccl profile`'s measurement (run_profile) of the emulated network gives the measured topology;
2. an Adaptive runtime runs an All-Reduce every iteration, with the ring executed over the same emulated
   network as the "native" competitor (gloo's own collective would bypass the emulation);
3. at iteration --slow-at, link 0->1 becomes --factor times slower; the probes flag it, the runtime
   re-plans, evaluates the new plan against the ring and keeps the faster;
4. reported: the iteration of detection, the new plan's measured time against the synthesizer's
   prediction, the old plan's time on the degraded link, the ring's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from autoccl import synth as S
from autoccl.adaptive import collectives as C
from autoccl.adaptive.launch import run_local
from autoccl.adaptive.plan import Plan
from autoccl.adaptive.profile import measured_topology, run_profile
from autoccl.adaptive.runtime import Adaptive
from autoccl.adaptive.transport import EmulatedTransport, LinkModel, TorchTransport


def worker(rank: int, world: int, cfg: dict[str, Any]) -> dict[str, Any]:
    torch.manual_seed(0)
    links = {
        (a, b): LinkModel(cfg["latency_us"], cfg["bandwidth_gbps"])
        for a in range(world)
        for b in range(world)
        if a != b
    }
    emu = EmulatedTransport(TorchTransport(), links)
    structure = {"name": "emulated", "npus": [f"emu/r{r}" for r in range(world)]}
    t0 = time.perf_counter()
    prof = run_profile(emu, "cpu", cfg["profile_sizes"], repeats=cfg["profile_repeats"])
    doc, model = measured_topology(structure, prof)
    profile_s = time.perf_counter() - t0
    topo = S.topology_from_dict(doc)
    nbytes = cfg["elements"] * 4
    ring = Plan.from_schedule(S.baseline(topo, "ring", "allreduce", float(nbytes)), topo)

    def ring_native(x: torch.Tensor, op: Any) -> None:
        C.all_reduce(x, ring, op, transport=emu)

    ad = Adaptive(
        doc,
        transport=emu,
        chunks=cfg["chunks"],
        seeds=cfg["seeds"],
        probe_bytes=cfg["probe_bytes"],
        eval_calls=cfg["eval_calls"],
        native={"allreduce": ring_native},
    )
    x = torch.empty(cfg["elements"])
    rows = []
    for it in range(cfg["iters"]):
        if it == cfg["slow_at"] and rank == cfg["slow_src"]:
            emu.set_link(
                cfg["slow_src"],
                cfg["slow_dst"],
                LinkModel(cfg["latency_us"], cfg["bandwidth_gbps"] / cfg["factor"]),
            )
        x.fill_(1.0)
        dist.barrier()
        t1 = time.perf_counter()
        mode = ad.all_reduce(x)
        dt = (time.perf_counter() - t1) * 1e6
        ok = bool(torch.all(x == world))
        version = ad.version
        plan = ad.plan("allreduce", nbytes)
        t2 = time.perf_counter()
        events = [e.to_dict() for e in ad.step()]
        step_us = (time.perf_counter() - t2) * 1e6
        rows.append(
            {
                "iter": it,
                "us": dt,
                "step_us": step_us,
                "mode": mode,
                "version": version,
                "predicted_us": plan.time_us,
                "correct": ok,
                "events": events,
            }
        )
    emu.close()
    return {
        "rows": rows,
        "profile": prof.to_dict() if rank == 0 else None,
        "doc": doc if rank == 0 else None,
        "final_doc": ad.topology_document() if rank == 0 else None,
        "model": model,
        "profile_s": profile_s,
        "ring_predicted_us": S.simulate(topo, S.baseline(topo, "ring", "allreduce", float(nbytes)))[
            "time_us"
        ],
    }


def summarize(results: list[dict[str, Any]], cfg: dict[str, Any]) -> dict[str, Any]:
    n = len(results[0]["rows"])
    per_iter = [max(r["rows"][i]["us"] for r in results) for i in range(n)]  # the slowest rank's time
    # step(): probes, agreement, and at a re-plan the flagged link's measurement (the slowest rank)
    step_us = [max(r["rows"][i]["step_us"] for r in results) for i in range(n)]
    rows = results[0]["rows"]
    events = [e for row in rows for e in row["events"]]
    drift = next((e for e in events if e["kind"] == "drift"), None)
    replan = next((e for e in events if e["kind"] == "replan"), None)
    choices = [e for e in events if e["kind"] == "choice"]
    slow_at = cfg["slow_at"]
    before = [
        per_iter[i] for i in range(n) if i < slow_at and rows[i]["mode"] == "plan" and rows[i]["version"] == 0
    ]
    degraded = [
        per_iter[i]
        for i in range(n)
        if i >= slow_at and rows[i]["version"] == 0 and rows[i]["mode"] == "plan"
    ]
    v_new = replan["version"] if replan else None
    after_rows = [
        i for i in range(n) if v_new is not None and rows[i]["version"] == v_new and rows[i]["mode"] == "plan"
    ]
    after = [per_iter[i] for i in after_rows]
    ring_after = [per_iter[i] for i in range(n) if i >= slow_at and rows[i]["mode"] == "native"]
    predicted_new = rows[after_rows[0]]["predicted_us"] if after_rows else None
    out: dict[str, Any] = {
        "config": cfg,
        "link_model": results[0]["model"],
        "all_correct": all(row["correct"] for r in results for row in r["rows"]),
        "predicted_initial_us": rows[0]["predicted_us"],
        "measured_initial_us": statistics.median(before) if before else None,
        "measured_degraded_old_plan_us": statistics.median(degraded) if degraded else None,
        "detected_at_iter": drift["step"] - 1 if drift else None,
        "iterations_to_detect": (drift["step"] - 1 - slow_at) if drift else None,
        "drift_event": drift,
        "replan_event": replan,
        "choices": choices,
        "predicted_new_us": predicted_new,
        "measured_new_us": statistics.median(after) if after else None,
        "measured_ring_degraded_us": statistics.median(ring_after) if ring_after else None,
        "ring_predicted_initial_us": results[0]["ring_predicted_us"],
        "per_iter_us": per_iter,
        "step_us": step_us,
        "step_median_us": statistics.median(step_us),
        "replan_step_us": step_us[drift["step"] - 1] if drift else None,
        "modes": [row["mode"] for row in rows],
        "versions": [row["version"] for row in rows],
        "profile_s": max(r["profile_s"] for r in results),
    }
    if out["predicted_new_us"] and out["measured_new_us"]:
        out["new_plan_error"] = out["measured_new_us"] / out["predicted_new_us"] - 1
    if out["predicted_initial_us"] and out["measured_initial_us"]:
        out["initial_plan_error"] = out["measured_initial_us"] / out["predicted_initial_us"] - 1
    return out


def exact_ratio_prediction(doc: dict[str, Any], cfg: dict[str, Any]) -> float:
    """The synthesizer's prediction had the probes seen the slowdown exactly: the measured topology with the
    slowed link's measured bandwidth divided by --factor (separates the probes' error from the model's)."""
    exact = json.loads(json.dumps(doc))
    for link in exact["links"]:
        if link["src"] == doc["npus"][cfg["slow_src"]] and link["dst"] == doc["npus"][cfg["slow_dst"]]:
            link["bandwidth_gbps"] /= cfg["factor"]
    topo = S.topology_from_dict(exact)
    nbytes = float(cfg["elements"] * 4)
    sched, _ = S.synthesize(topo, "allreduce", nbytes, chunks=cfg["chunks"], seeds=cfg["seeds"])
    return float(Plan.from_schedule(sched, topo).time_us)


def estimate_sensitivity(doc: dict[str, Any], summary: dict[str, Any]) -> dict[str, float]:
    """The synthesizer's prediction for the plan it would make with the slowed link at k times the
    re-plan's estimate (k = 0.8 ... 1.25): how much the prediction depends on the estimate at all."""
    cfg, drift = summary["config"], summary["drift_event"]
    if not drift:
        return {}
    src, dst = doc["npus"][cfg["slow_src"]], doc["npus"][cfg["slow_dst"]]
    nbytes = float(cfg["elements"] * 4)
    out = {}
    for k in (0.8, 0.9, 1.0, 1.1, 1.25):
        d = json.loads(json.dumps(doc))
        for link in d["links"]:
            if (link["src"], link["dst"]) == (src, dst):
                link["bandwidth_gbps"] = drift["bandwidth_gbps_after"] * k
        topo = S.topology_from_dict(d)
        sched, _ = S.synthesize(topo, "allreduce", nbytes, chunks=cfg["chunks"], seeds=cfg["seeds"])
        out[str(k)] = float(Plan.from_schedule(sched, topo).time_us)
    return out


def link_estimates(doc: dict[str, Any], summary: dict[str, Any]) -> dict[str, float | None]:
    """The slowed link's true bandwidth, the re-plan's estimate, and what scaling the link by the flagging
    probes' ratio (the rule before the refit) would have set."""
    cfg, drift = summary["config"], summary["drift_event"]
    true_gbps = cfg["bandwidth_gbps"] / cfg["factor"]
    if not drift:
        return {"slow_link_true_gbps": true_gbps, "slow_link_estimate_gbps": None, "ratio_rule_gbps": None}
    src, dst = doc["npus"][cfg["slow_src"]], doc["npus"][cfg["slow_dst"]]
    link = next(x for x in doc["links"] if (x["src"], x["dst"]) == (src, dst))
    lat, bw, probe = float(link["latency_us"]), float(link["bandwidth_gbps"]), cfg["probe_bytes"]
    target_us = (lat + probe / (bw * 1e3)) * drift["ratio"]
    return {
        "slow_link_true_gbps": true_gbps,
        "slow_link_estimate_gbps": drift["bandwidth_gbps_after"],
        "ratio_rule_gbps": probe / max(target_us - lat, 1e-3) / 1e3,
    }


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    y = [v / 1e3 for v in summary["per_iter_us"]]
    colors = ["tab:blue" if m == "plan" else "tab:gray" for m in summary["modes"]]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    ax.scatter(range(len(y)), y, c=colors, s=10)
    ax.axvline(summary["config"]["slow_at"], color="tab:red", ls="--", lw=1, label="link 0->1 slowed")
    if summary["detected_at_iter"] is not None:
        ax.axvline(summary["detected_at_iter"], color="tab:green", ls=":", lw=1, label="drift detected")
    for key, style in (("predicted_initial_us", "-"), ("predicted_new_us", "--")):
        if summary.get(key):
            ax.axhline(
                summary[key] / 1e3,
                color="black",
                ls=style,
                lw=0.8,
                label=key.replace("_us", "").replace("_", " "),
            )
    ax.set_xlabel("iteration")
    ax.set_ylabel("All-Reduce time (ms, slowest rank)")
    ax.set_title("blue: synthesized plan, gray: ring (evaluation)", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--elements", type=int, default=1 << 20, help="float32 elements per All-Reduce")
    ap.add_argument("--latency-us", type=float, default=50.0)
    ap.add_argument("--bandwidth-gbps", type=float, default=0.01)
    ap.add_argument("--factor", type=float, default=4.0)
    ap.add_argument("--slow-at", type=int, default=20)
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--chunks", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=4)
    ap.add_argument("--probe-bytes", type=int, default=256 << 10)
    ap.add_argument("--eval-calls", type=int, default=3)
    ap.add_argument("--out", type=Path, help="directory for summary.json and replan.png")
    a = ap.parse_args()
    cfg = {
        "nproc": a.nproc,
        "elements": a.elements,
        "latency_us": a.latency_us,
        "bandwidth_gbps": a.bandwidth_gbps,
        "factor": a.factor,
        "slow_at": a.slow_at,
        "iters": a.iters,
        "chunks": a.chunks,
        "seeds": a.seeds,
        "probe_bytes": a.probe_bytes,
        "eval_calls": a.eval_calls,
        "slow_src": 0,
        "slow_dst": 1,
        "profile_sizes": [16 << 10, 64 << 10, 256 << 10],
        "profile_repeats": 2,
    }
    t0 = time.time()
    results = run_local(worker, a.nproc, cfg, timeout_s=900)
    summary = summarize(results, cfg)
    summary["predicted_new_exact_ratio_us"] = exact_ratio_prediction(results[0]["doc"], cfg)
    summary.update(link_estimates(results[0]["doc"], summary))
    summary["predicted_new_at_scaled_estimate_us"] = estimate_sensitivity(results[0]["doc"], summary)
    summary["wall_s"] = time.time() - t0
    summary["torch"] = torch.__version__
    keys = [
        "link_model",
        "all_correct",
        "predicted_initial_us",
        "measured_initial_us",
        "initial_plan_error",
        "measured_degraded_old_plan_us",
        "iterations_to_detect",
        "drift_event",
        "step_median_us",
        "replan_step_us",
        "predicted_new_us",
        "measured_new_us",
        "new_plan_error",
        "predicted_new_exact_ratio_us",
        "slow_link_true_gbps",
        "slow_link_estimate_gbps",
        "ratio_rule_gbps",
        "predicted_new_at_scaled_estimate_us",
        "measured_ring_degraded_us",
        "choices",
        "wall_s",
    ]
    print(json.dumps({k: summary.get(k) for k in keys}, indent=1, default=str))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / "summary.json").write_text(json.dumps(summary, indent=1, default=str))
        (a.out / "topology-measured.json").write_text(json.dumps(results[0]["doc"], indent=1))
        (a.out / "topology-after-replan.json").write_text(json.dumps(results[0]["final_doc"], indent=1))
        plot(summary, a.out / "replan.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
