"""Many concurrent evaluations on one machine: asyncio calls, several in flight per GPU.

    pool = EvalPool(EvalConfig())                 # every visible GPU (or CPU slots)
    results = await asyncio.gather(*(pool.evaluate(t, s) for t, s in jobs))

Only the timed calls of an evaluation hold the GPU (`locks.py`), so `per_device` evaluations (default 3
on CUDA) run at once per GPU, with spare worker pairs started ahead when `EvalConfig.prewarm` asks.
With several GPUs, each GPU's evaluations run in a harness process of their own (`device_host.py`).
Across machines, `cuda_agent.env.infra.service` runs one pool per GPU behind Ray.
"""

from __future__ import annotations

import asyncio
import atexit
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Iterable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.infra.device_host import DeviceHost
from cuda_agent.env.run.evaluation import evaluate
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task

PER_DEVICE = {"cuda": 3, "cpu": 1}   # evaluations in flight per device
SPARES_PER_SLOT = 3                  # spare worker pairs per evaluation in flight (`EvalPool._sized`)


def visible_gpus() -> list[int]:
    import torch

    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


class EvalPool:
    def __init__(self, config: EvalConfig | None = None, gpus: Iterable[int] | None = None,
                 cpu_slots: int | None = None, per_device: int | None = None, processes: bool | None = None):
        """`processes`: one harness process per device (default: with more than one GPU)."""
        self.config = config or EvalConfig()
        self.backend = self.config.resolved_backend()
        self.per_device = max(1, per_device or PER_DEVICE.get(self.backend, 1))
        if self.backend == "cuda":
            devices: list[int | None] = list(gpus if gpus is not None else visible_gpus())
            if not devices:
                raise RuntimeError("EvalPool(backend='cuda') found no GPU")
        else:
            # CPU timings are disturbed by neighbours too: default to one device per two cores.
            devices = [None] * (cpu_slots or max(1, (os.cpu_count() or 2) // 2))
        self.devices = devices
        # round-robin over devices, so the first jobs spread out before any device takes a second one
        self.slots: list[int | None] = [d for _ in range(self.per_device) for d in devices]
        self._free: asyncio.Queue | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._threads = ThreadPoolExecutor(max_workers=len(self.slots), thread_name_prefix="eval-pool")
        if processes is None:
            processes = self.backend == "cuda" and len(devices) > 1
        self._hosts: list[DeviceHost] | None = None   # each device's process, in `devices`' order
        if processes:
            self._hosts = [DeviceHost(device, self.per_device) for device in devices]
            atexit.register(self.close)

    def close(self) -> None:
        """Stop the devices' harness processes (with `processes`), after what they run."""
        hosts, self._hosts = self._hosts, None
        for host in hosts or []:
            host.close()

    @property
    def capacity(self) -> int:
        """Evaluations the pool runs at once (callers keep that many submitted)."""
        return len(self.slots)

    def _queue(self) -> asyncio.Queue:
        """The free slots, made inside the running event loop (a queue belongs to one loop): a pool used
        again from another loop (a second `asyncio.run`) starts with all its slots free again."""
        loop = asyncio.get_running_loop()
        if self._free is None or self._loop is not loop:
            self._free, self._loop = asyncio.Queue(), loop
            for _ in range(self.per_device):   # device indices, so equal CPU slots stay apart
                for index in range(len(self.devices)):
                    self._free.put_nowait(index)
        return self._free

    def _sized(self, config: EvalConfig) -> EvalConfig:
        """Spare worker pairs (when asked for): SPARES_PER_SLOT times what a device has in flight. Each
        evaluation takes a pair and starts the next, so a pair's head start is the spares' count over
        the rate, and it must outlast a pair's start (sandboxed imports and the CUDA set-up, a few
        seconds under load; `trace.startup.*`, figures in docs/benchmarks.md)."""
        wanted = SPARES_PER_SLOT * self.per_device
        if config.prewarm and int(config.prewarm) < wanted:
            return replace(config, prewarm=wanted)
        return config

    async def evaluate(self, task: Task, solution: Solution, config: EvalConfig | None = None) -> EvalResult:
        """`config` (default: the pool's) lets one pool serve different settings, e.g. an agent's
        verify (no baselines) and its final evaluation."""
        free = self._queue()
        index = await free.get()
        try:
            run = self._sized(config or self.config)
            if self._hosts is not None:
                return await asyncio.wrap_future(self._hosts[index].submit(task, solution, run))
            device = self.devices[index]
            loop = asyncio.get_running_loop()
            return await loop.run_in_executor(self._threads, lambda: evaluate(task, solution, run, gpu=device))
        finally:
            free.put_nowait(index)

    async def evaluate_many(self, jobs: Iterable[tuple[Task, Solution]]) -> list[EvalResult]:
        return await asyncio.gather(*(self.evaluate(t, s) for t, s in jobs))
