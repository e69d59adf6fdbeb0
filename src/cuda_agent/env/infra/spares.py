"""Pre-started worker pairs, so an evaluation does not wait for Python, torch and CUDA to start.

With `EvalConfig(prewarm=True)` (agent loops, pools, benchmarks), each evaluation takes a ready
judge/candidate pair and starts the next one in the background (`prewarm=N` keeps N waiting, for
callers that evaluate back to back faster than a pair starts); the start-up cost (about a second
or two per process) leaves the critical path of the next evaluation. Workers still serve exactly
one evaluation each (but a persistent judge's, CUDA_AGENT_PERSISTENT_JUDGE=1: judges.py): isolation is
unchanged.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuda_agent.env.infra.isolation import Worker


@dataclass
class WorkerPair:
    job_dir: Path
    judge: Worker
    candidate: Worker

    def discard(self) -> None:
        self.judge.kill()
        self.candidate.kill()
        shutil.rmtree(self.job_dir, ignore_errors=True)


_spares: dict[tuple, list[WorkerPair]] = {}
_lock = threading.Lock()


def take(key: tuple) -> WorkerPair | None:
    """The oldest waiting pair for `key` (the likeliest to be ready), or None."""
    while True:
        with _lock:
            waiting = _spares.get(key) or []
            pair = waiting.pop(0) if waiting else None
        if pair is None:
            return None
        if pair.judge.proc.poll() is None and pair.candidate.proc.poll() is None:
            return pair
        pair.discard()  # died while waiting (e.g. killed from outside): try the next one


def prepare(key: tuple, start: Callable[[Path], WorkerPair], job_root: str | None, count: int = 1) -> None:
    """Start spare pairs for `key` until `count` are waiting."""
    while True:
        with _lock:
            if len(_spares.get(key, [])) >= count:
                return
        job_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root))
        try:
            pair = start(job_dir)
        except Exception:
            shutil.rmtree(job_dir, ignore_errors=True)
            return
        with _lock:
            waiting = _spares.setdefault(key, [])
            surplus = len(waiting) >= count
            if not surplus:
                waiting.append(pair)
        if surplus:  # another thread filled the slot meanwhile
            pair.discard()
            return


@atexit.register
def discard_all() -> None:
    with _lock:
        pairs = [pair for waiting in _spares.values() for pair in waiting]
        _spares.clear()
    for pair in pairs:
        pair.discard()
