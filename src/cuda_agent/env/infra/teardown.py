"""Workers killed but not gone yet, by GPU.

A killed worker's exit is reaped in the background (`isolation.Worker.kill`): a CUDA context holding
tens of GB takes a second or more to tear down, and a small evaluation need not wait for it. A task
whose tensors take a large share of the GPU must: its judge would otherwise find the memory of the
evaluation before it still held (`wait_gone`).
"""

from __future__ import annotations

import threading
import time
from collections import Counter

_exiting: Counter = Counter()          # GPU index (None: no GPU) -> workers killed, not yet reaped
_changed = threading.Condition()


def exiting(gpu: int | None) -> None:
    """A worker on `gpu` was killed; `gone` follows once its process has exited."""
    with _changed:
        _exiting[gpu] += 1


def gone(gpu: int | None) -> None:
    with _changed:
        _exiting[gpu] -= 1
        if _exiting[gpu] <= 0:
            del _exiting[gpu]
        _changed.notify_all()


def pending(gpu: int | None) -> int:
    with _changed:
        return _exiting[gpu]


def wait_gone(gpu: int | None, timeout: float) -> float:
    """Wait until every worker killed on `gpu` has exited (at most `timeout` seconds); the seconds waited."""
    start = time.monotonic()
    with _changed:
        _changed.wait_for(lambda: _exiting[gpu] <= 0, timeout)
    return time.monotonic() - start
