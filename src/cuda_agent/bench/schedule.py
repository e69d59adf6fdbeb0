"""Running a run's jobs: a fixed number of workers take jobs in order until none is left or the
run's time is up (`--max-minutes`: no job starts after it, the ones in flight finish), so a run
can be cut into time-boxed calls and resumed."""

from __future__ import annotations

import asyncio
import time
from typing import Awaitable, Callable, Iterable, TypeVar

Job = TypeVar("Job")


class Deadline:
    def __init__(self, minutes: float | None):
        self.at = time.monotonic() + minutes * 60 if minutes else None

    @property
    def passed(self) -> bool:
        return self.at is not None and time.monotonic() >= self.at


async def run_jobs(jobs: Iterable[Job], work: Callable[[Job], Awaitable[None]], workers: int,
                   deadline: Deadline) -> int:
    """Run `work(job)` with `workers` at a time; returns how many jobs were left unstarted."""
    queue = list(jobs)
    queue.reverse()

    async def worker():
        while queue and not deadline.passed:
            await work(queue.pop())

    await asyncio.gather(*(worker() for _ in range(max(1, workers))))
    return len(queue)
