"""The plugin's messages go through NCCL's logger: with NCCL_DEBUG=INFO (the emulator's --verbose) one line
per pinned task with its gain, under a subsystem NCCL shows by default (INIT), and nothing written to
stderr past the logger."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest
from emu_helpers import assert_clean

from autoccl.emu import run, simple

INIT = 0x1
TUNING = 0x40
LINE = re.compile(r"^autoccl-emu: NCCL INFO \[(\d+) [^\]]*\] (.*)$")


@pytest.mark.sanitize
def test_one_info_line_per_pinned_task_with_its_gain(plugin: Path, tmp_path: Path) -> None:
    env = {"AUTOCCL_MODE": "online", "AUTOCCL_HW": "GPU Xx4", "AUTOCCL_CACHE_DIR": str(tmp_path / "cache")}
    # lead 8: the rank threads stay within 8 calls of each other, as CUDA's finite launch queues and a job's
    # host syncs keep real ranks. Unbounded (the scenario's default), a rank thread could run a thousand calls
    # ahead on a loaded machine (CI: 2 cores under the parallel suite): the authority had planned those calls
    # NCCL's choice before its search began, and that rank's calls ran untimed, so no search ended in 1200
    # calls a task (three CI failures). Bounded, the searches end at calls 11-108, under load too.
    tasks = {"allreduce": [1 << 20, 32 << 20], "allgather": [4 << 20]}
    sc = replace(simple(tasks, nranks=4, repeat=1200), lead=8)
    res = run(sc, plugin=plugin, env=env, timeout=240, extra_args=["--verbose"])
    assert_clean(res)
    lines = res.stderr.splitlines()
    # Every line on stderr is the emulator's (NCCL's logger prints them): the plugin writes none itself.
    assert all(ln.startswith("autoccl-emu: ") for ln in lines if ln.strip()), [
        ln for ln in lines if ln.strip() and not ln.startswith("autoccl-emu: ")
    ][:5]
    pinned = []
    for ln in lines:
        m = LINE.match(ln)
        if m and " pinned " in m.group(2):
            pinned.append((int(m.group(1)), m.group(2)))
    # A task whose pinned segment its calls reached (the search plans it ahead of the calls) has one line.
    converged = {
        (t["coll"], t["bytes"]): t
        for t in res.trace
        if t.get("ev") == "task" and t["rank"] == 0 and t.get("converged_at") is not None
    }
    reached = {k for k, t in converged.items() if t["converged_at"] + 16 < t["calls"]}
    searched = ("calls", "converged_at", "search_samples", "search_lost", "search_late", "search_wait_calls")
    assert reached, (
        "no task converged well before the end",
        [
            {"task": (t["coll"], t["bytes"]), **{f: t.get(f) for f in searched}}
            for t in res.trace
            if t.get("ev") == "task" and t["rank"] == 0
        ],
    )
    named = [re.search(r" (\w+) bytes=(\d+) pipe=", text) for _, text in pinned]
    keys = [(m.group(1), int(m.group(2))) for m in named if m]
    assert len(keys) == len(pinned) == len(set(keys)), pinned
    assert reached <= set(keys) <= set(converged), (keys, converged.keys())
    for flags, text in pinned:
        assert flags & INIT and flags & TUNING, (flags, text)
        assert re.search(r"gain [+-][0-9]+\.[0-9]%", text), text
