"""A watchdog that writes every thread's Python stack when a training step runs too long.

`faulthandler.dump_traceback_later` does the same from a C thread that reads the other threads' frames
without the GIL, while they run: a step that ends during the dump can free a frame under it and the rank
dies with SIGSEGV. This watchdog takes the GIL and reads `sys._current_frames()`, a consistent snapshot;
the price is that a thread holding the GIL inside C code delays the report until it lets go (PyTorch's
blocking waits and collectives release it)."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from typing import TextIO


class StallReport:
    """`arm(timeout_s)` before a step, `disarm()` after it: a step still running `timeout_s` later writes
    one report (every thread's stack, most recent call first) to `out`; one per arming."""

    def __init__(self, out: TextIO | None = None) -> None:
        self._out = out
        self._cv = threading.Condition()
        self._deadline: float | None = None
        self._timeout_s = 0.0
        self._closed = False
        self.reports = 0
        self._thread = threading.Thread(target=self._watch, name="autoccl-stall-report", daemon=True)
        self._thread.start()

    def arm(self, timeout_s: float) -> None:
        if timeout_s <= 0:
            raise ValueError(f"stall report timeout must be > 0 s, got {timeout_s}")
        with self._cv:
            self._timeout_s = timeout_s
            self._deadline = time.monotonic() + timeout_s
            self._cv.notify()

    def disarm(self) -> None:
        with self._cv:
            self._deadline = None
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._deadline = None
            self._cv.notify()
        self._thread.join()

    def __enter__(self) -> StallReport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def _watch(self) -> None:
        with self._cv:
            while not self._closed:
                if self._deadline is None:
                    self._cv.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cv.wait(left)
                    continue
                self._deadline = None  # one report per arming
                self._write(self._timeout_s)

    def _write(self, timeout_s: float) -> None:
        out = self._out if self._out is not None else sys.stderr
        names = {t.ident: t.name for t in threading.enumerate()}
        me = threading.get_ident()
        lines = [f"Step running for more than {timeout_s:g} s (--stall-report-s); every thread's stack:\n"]
        for ident, frame in sys._current_frames().items():
            if ident == me:
                continue
            lines.append(f'\nThread 0x{ident:016x} "{names.get(ident, "?")}" (most recent call first):\n')
            for fs in reversed(traceback.extract_stack(frame)):
                lines.append(f'  File "{fs.filename}", line {fs.lineno} in {fs.name}\n')
        out.write("".join(lines))
        out.flush()
        self.reports += 1
