"""Workers started ahead, so an evaluation does not wait for Python, torch and CUDA to start.

With `EvalConfig(prewarm=True)` (agent loops, pools, benchmarks), each evaluation takes a ready
spare and starts the next one (`prewarm=N` keeps N waiting, for callers that evaluate back to back
faster than a spare starts); the start-up cost (about a second or two per process) leaves the
critical path of the next evaluation. A spare is a judge and a candidate sharing a staging file (on
the CPU backend with the candidate's twin, run/twin.py);
with kept judges (CUDA_AGENT_PERSISTENT_JUDGE=1: judges.py) it is the candidate alone, with the
staging file kept open for the judge its evaluation takes when its job starts: a judge held by a
waiting spare would be one the evaluations in flight cannot take. Workers still serve exactly one
evaluation each (but a kept judge): isolation is unchanged.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from cuda_agent.env.infra.isolation import Worker


@dataclass
class Spare:
    job_dir: Path
    candidate: Worker
    judge: Worker | None = None      # None with kept judges: taken when the evaluation's job starts
    staging_fd: int | None = None    # the staging file the candidate has, ours until the judge has it
    twin: Worker | None = None       # the candidate's twin (run/twin.py), on the CPU backend

    def alive(self) -> bool:
        return all(worker.proc.poll() is None for worker in (self.judge, self.candidate, self.twin)
                   if worker is not None)

    def discard(self) -> None:
        for worker in (self.judge, self.candidate, self.twin):
            if worker is not None:
                worker.kill()
        if self.staging_fd is not None:
            os.close(self.staging_fd)
            self.staging_fd = None
        shutil.rmtree(self.job_dir, ignore_errors=True)


_spares: dict[tuple, list[Spare]] = {}
_lock = threading.Lock()


def take(key: tuple) -> Spare | None:
    """The oldest waiting spare for `key` (the likeliest to be ready), or None."""
    while True:
        with _lock:
            queue = _spares.get(key) or []
            spare = queue.pop(0) if queue else None
        if spare is None:
            return None
        if spare.alive():
            return spare
        spare.discard()  # died while waiting (e.g. killed from outside): try the next one


def prepare(key: tuple, start: Callable[[Path], Spare], job_root: str | None, count: int = 1) -> None:
    """Start spares for `key` until `count` are waiting."""
    while True:
        with _lock:
            if len(_spares.get(key, [])) >= count:
                return
        job_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root))
        try:
            spare = start(job_dir)
        except Exception:
            shutil.rmtree(job_dir, ignore_errors=True)
            return
        with _lock:
            queue = _spares.setdefault(key, [])
            surplus = len(queue) >= count
            if not surplus:
                queue.append(spare)
        if surplus:  # another thread filled the slot meanwhile
            spare.discard()
            return


def waiting(key: tuple) -> list[Spare]:
    """The spares waiting for `key` now (a copy)."""
    with _lock:
        return list(_spares.get(key, []))


@atexit.register
def discard_all() -> None:
    with _lock:
        spares = [spare for queue in _spares.values() for spare in queue]
        _spares.clear()
    for spare in spares:
        spare.discard()
