"""Pre-started worker pairs, so an evaluation does not wait for Python, torch and CUDA to start.

With `EvalConfig(prewarm=True)` (agent loops, pools, benchmarks), each evaluation takes a ready
judge/candidate pair and starts the next one in the background; the start-up cost (about a second
or two per process) leaves the critical path of the next evaluation. Workers still serve exactly
one evaluation each: isolation is unchanged.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuda_agent.env.isolation import Worker


@dataclass
class WorkerPair:
    job_dir: Path
    judge: Worker
    candidate: Worker

    def discard(self) -> None:
        self.judge.kill()
        self.candidate.kill()
        shutil.rmtree(self.job_dir, ignore_errors=True)


_spares: dict[tuple, WorkerPair] = {}
_lock = threading.Lock()


def take(key: tuple) -> WorkerPair | None:
    with _lock:
        pair = _spares.pop(key, None)
    if pair and (pair.judge.proc.poll() is not None or pair.candidate.proc.poll() is not None):
        pair.discard()  # died while waiting (e.g. killed from outside): start fresh instead
        return None
    return pair


def prepare(key: tuple, start: Callable[[Path], WorkerPair], job_root: str | None) -> None:
    """Start a spare pair for `key` unless one is waiting already."""
    with _lock:
        if key in _spares:
            return
    job_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root))
    try:
        pair = start(job_dir)
    except Exception:
        shutil.rmtree(job_dir, ignore_errors=True)
        return
    with _lock:
        old = _spares.get(key)
        _spares[key] = pair
    if old:
        old.discard()


@atexit.register
def discard_all() -> None:
    with _lock:
        pairs = list(_spares.values())
        _spares.clear()
    for pair in pairs:
        pair.discard()
