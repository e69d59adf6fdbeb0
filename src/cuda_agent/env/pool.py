"""Many concurrent evaluations on one machine: asyncio calls, one job per GPU at a time.

    pool = EvalPool(EvalConfig())                 # every visible GPU (or CPU slots)
    results = await asyncio.gather(*(pool.evaluate(t, s) for t, s in jobs))

Each job runs `evaluate` (its own judge and candidate processes) on a GPU it holds alone, so
timings are not disturbed by neighbours. Results are plain `EvalResult` data. Across machines,
run one pool per node behind Ray (see docs/environment.md); this class schedules nothing beyond
its own GPUs.
"""

from __future__ import annotations

import asyncio
import os
from typing import Iterable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.evaluation import evaluate
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task


def visible_gpus() -> list[int]:
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


class EvalPool:
    def __init__(self, config: EvalConfig | None = None, gpus: Iterable[int] | None = None,
                 cpu_slots: int | None = None):
        self.config = config or EvalConfig()
        self.backend = self.config.resolved_backend()
        if self.backend == "cuda":
            self.slots: list[int | None] = list(gpus if gpus is not None else visible_gpus())
            if not self.slots:
                raise RuntimeError("EvalPool(backend='cuda') found no GPU")
        else:
            # CPU timings are disturbed by neighbours too: default to one job per two cores.
            self.slots = [None] * (cpu_slots or max(1, (os.cpu_count() or 2) // 2))
        self._free: asyncio.Queue | None = None

    def _queue(self) -> asyncio.Queue:
        if self._free is None:  # created lazily, inside the running event loop
            self._free = asyncio.Queue()
            for slot in self.slots:
                self._free.put_nowait(slot)
        return self._free

    async def evaluate(self, task: Task, solution: Solution, config: EvalConfig | None = None) -> EvalResult:
        """`config` (default: the pool's) lets one pool serve different settings, e.g. an agent's
        verify (no baselines) and its final evaluation."""
        free = self._queue()
        slot = await free.get()
        try:
            return await asyncio.to_thread(evaluate, task, solution, config or self.config, gpu=slot)
        finally:
            free.put_nowait(slot)

    async def evaluate_many(self, jobs: Iterable[tuple[Task, Solution]]) -> list[EvalResult]:
        return await asyncio.gather(*(self.evaluate(t, s) for t, s in jobs))
