"""Overlap that tests assert, made certain instead of hoped for: a short sleep only overlaps calls
when the machine starts them quickly, which a loaded 2-core CI runner does not promise."""

from __future__ import annotations

import asyncio
import threading
import time


class StartGate:
    """Holds each of the first `n` callers until all `n` have arrived, so they are surely in flight
    at once; later callers pass straight through. Fewer than `n` arriving within `timeout` seconds
    (what the code under test allowed did not overlap) raises TimeoutError."""

    def __init__(self, n: int, timeout: float = 60.0):
        self.n, self.timeout = n, timeout
        self.arrived = 0
        self._cond = threading.Condition()

    def wait(self) -> None:
        with self._cond:
            self.arrived += 1
            self._cond.notify_all()
            if not self._cond.wait_for(lambda: self.arrived >= self.n, self.timeout):
                raise TimeoutError(f"only {self.arrived} of {self.n} calls were in flight at once")

    async def async_wait(self) -> None:
        self.arrived += 1
        deadline = time.monotonic() + self.timeout
        while self.arrived < self.n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {self.arrived} of {self.n} calls were in flight at once")
            await asyncio.sleep(0.005)
