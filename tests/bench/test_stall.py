"""The stall report's watchdog: a step longer than its timeout writes every thread's stack once; a step
that ends in time writes nothing; arming and disarming at every step while threads run never crashes."""

from __future__ import annotations

import io
import threading
import time

import pytest

from autoccl.bench.stall import StallReport


def _slow_step_in_a_named_function(s: float) -> None:
    time.sleep(s)


def test_long_step_writes_every_threads_stack_once() -> None:
    out = io.StringIO()
    stop = threading.Event()
    helper = threading.Thread(target=stop.wait, name="helper-waiting", daemon=True)
    helper.start()
    with StallReport(out) as stall:
        stall.arm(0.05)
        _slow_step_in_a_named_function(0.4)
        stall.disarm()
        assert stall.reports == 1
    stop.set()
    text = out.getvalue()
    assert "more than 0.05 s" in text and text.count("most recent call first") >= 2
    assert "_slow_step_in_a_named_function" in text and '"helper-waiting"' in text
    assert "autoccl-stall-report" not in text  # the watchdog leaves itself out


def test_step_in_time_writes_nothing() -> None:
    out = io.StringIO()
    with StallReport(out) as stall:
        for _ in range(20):
            stall.arm(5.0)
            stall.disarm()
        time.sleep(0.05)
    assert stall.reports == 0 and out.getvalue() == ""


def test_reports_while_threads_run_and_steps_end() -> None:
    """faulthandler's watchdog read frames without the GIL and crashed a rank (SIGSEGV) when a 1 ms report
    raced a step's end; here the same race runs hundreds of times in this process."""
    out = io.StringIO()
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            sum(len(str(i)) for i in range(200))

    workers = [threading.Thread(target=churn, daemon=True) for _ in range(3)]
    for w in workers:
        w.start()
    # at least 300 races, and on until one report came (a loaded CI machine once gave the watchdog no turn
    # in 300): the GIL decides when it runs, so a count of races alone is no bound on the reports
    deadline = time.monotonic() + 20
    with StallReport(out) as stall:
        races = 0
        while races < 300 or (stall.reports == 0 and time.monotonic() < deadline):
            stall.arm(0.0005)
            sum(i * i for i in range(3000))
            stall.disarm()
            races += 1
    stop.set()
    for w in workers:
        w.join()
    assert stall.reports > 0 and "most recent call first" in out.getvalue()


def test_timeout_must_be_positive() -> None:
    with StallReport(io.StringIO()) as stall, pytest.raises(ValueError, match="> 0"):
        stall.arm(0)
