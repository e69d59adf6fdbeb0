"""Running a run's jobs: a fixed number of workers take jobs in order until none is left or the
run's time is up (`--max-minutes`: no job starts after it, the ones in flight finish), so a run
can be cut into time-boxed calls and resumed. A job that ran out of GPU memory beside others runs
again alone once the rest are done (KernelBench has tasks whose inputs alone take several GB)."""

from __future__ import annotations

import asyncio
import re
import time
from typing import Awaitable, Callable, Iterable, TypeVar

Job = TypeVar("Job")

_OOM = re.compile(r"out of memory|OutOfMemoryError|CUDNN_STATUS_ALLOC_FAILED|CUBLAS_STATUS_ALLOC_FAILED", re.I)


def is_out_of_memory(error: str | None) -> bool:
    return bool(error and _OOM.search(error))


class Deadline:
    """When no new job may start: `minutes` from now (None: never), or once `stop` says why."""

    def __init__(self, minutes: float | None):
        self.at = time.monotonic() + minutes * 60 if minutes else None
        self.stopped: str | None = None

    def stop(self, why: str) -> None:
        self.stopped = self.stopped or why

    @property
    def passed(self) -> bool:
        return self.stopped is not None or (self.at is not None and time.monotonic() >= self.at)


class FailureStreak:
    """Stops the run (`deadline.stop`) once `limit` jobs in a row, in the order they finish, ended on an
    infrastructure failure: a dead endpoint or evaluator fails every job alike, so the rest wait for a
    resume instead of failing one by one."""

    def __init__(self, deadline: Deadline, what: str, limit: int = 3):
        self.deadline, self.what, self.limit, self.count = deadline, what, limit, 0

    def note(self, failure: str | None) -> None:
        """`failure`: why the job that just finished was not scored on our side or the endpoint's (None: it was)."""
        self.count = self.count + 1 if failure else 0
        if failure and self.count >= self.limit:
            first = failure.strip().splitlines()[0][:300] if failure.strip() else "no detail"
            self.deadline.stop(f"{self.count} {self.what} in a row ended on an infrastructure failure (the last: "
                               f"{first})")


async def run_jobs(jobs: Iterable[Job], work: Callable[[Job, bool], Awaitable[bool | None]], workers: int,
                   deadline: Deadline) -> int:
    """Run `work(job, alone)` with `workers` at a time; a job for which it returns True (out of memory
    beside others) runs again after the rest with nothing else in flight (`alone=True`). Returns how
    many jobs were left unstarted."""
    queue = list(jobs)
    queue.reverse()
    again: list[Job] = []

    async def worker():
        while queue and not deadline.passed:
            job = queue.pop()
            if await work(job, False):
                again.append(job)

    await asyncio.gather(*(worker() for _ in range(max(1, workers))))
    left = len(queue)
    for job in again:
        if deadline.passed:
            left += 1
        else:
            await work(job, True)
    return left


def slow_first(tasks: list) -> list:
    """Level 3, then 2, then 1 (other groups after), each in order: the tasks whose torch.compile and
    evaluations take longest start first, so a run on several GPUs does not end on one of them alone."""
    def key(t):
        match = re.fullmatch(r"level(\d+)", t.group)
        return (-int(match[1]) if match else 0, t.group, t.number)
    return sorted(tasks, key=key)
