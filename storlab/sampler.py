"""A loop on its own thread that calls a function every period, testable with a fake clock: what the
probes sample with, and what holds a credit bucket (storlab.lab.credits)."""

from __future__ import annotations

import threading
import time
from typing import Callable


class Sampler:
    """Calls `record(weight_s)` every `period_s` on its own thread. The weight is the time since the
    previous sample, so a late sample (a busy machine) counts for the time it really covers."""

    def __init__(self, period_s: float, record: Callable[[float], None],
                 clock: Callable[[], float] = time.monotonic,
                 wait: Callable[[float], bool] | None = None):
        self.period_s = period_s
        self.record = record
        self.clock = clock
        self._stop = threading.Event()
        self._wait = wait or self._stop.wait
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def loop(self) -> None:
        last = self.clock()
        while not self._wait(self.period_s):
            now = self.clock()
            self.record(now - last)
            last = now

    def _guarded(self) -> None:
        try:
            self.loop()
        except BaseException as exc:  # a probe failing must not kill the run silently
            self.error = exc

    def start(self) -> None:
        self._thread = threading.Thread(target=self._guarded, name="storlab-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
