"""Evaluation as a service for many clients, across machines, through Ray (optional extra `[ray]`).

    service = EvalService("auto", EvalConfig(prewarm=True))    # or "ray://head:10001", "local"
    result = await service.evaluate(task, solution)             # the EvalPool interface
    service.shutdown()

One actor per GPU of the cluster, each owning a pipelined `EvalPool` for its GPU (`per_device`
evaluations in flight, prewarmed worker pairs); the client sends each evaluation to the actor with
the fewest in flight. RL rollout workers and `cuda-agent bench --ray ADDRESS` share this client.
On the CPU backend, `actors` CPU actors stand in for the GPUs (tests, CPU-sized tasks).

Every node needs cuda-agent installed (same version) and, for the candidate sandbox, bubblewrap.
Builds and baselines are cached on each node in its own cache folder (`cache_dir`, the same path on
every node; default: each node's `CUDA_AGENT_CACHE` or ~/.cache/cuda-agent), not the client's.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task


def _ray():
    try:
        import ray
    except ImportError:
        raise RuntimeError("the evaluation service needs Ray: pip install 'cuda-agent[ray]'") from None
    return ray


class DeviceEvaluator:
    """The actor: one GPU (Ray sets CUDA_VISIBLE_DEVICES to it) or one CPU slot, one pipelined pool."""

    def __init__(self, config: dict, per_device: int | None, cache_dir: str | None):
        from cuda_agent.env.config import default_cache_dir
        from cuda_agent.env.pool import EvalPool

        self.cache_dir = cache_dir or str(default_cache_dir())   # this node's, not the client's
        base = self._local(config)
        backend = base.resolved_backend()
        self.pool = EvalPool(base, gpus=[0] if backend == "cuda" else None, cpu_slots=1, per_device=per_device)

    def _local(self, config: dict) -> EvalConfig:
        return EvalConfig.from_dict({**config, "cache_dir": self.cache_dir})

    async def evaluate(self, task: Task, solution: Solution, config: dict | None = None) -> dict:
        result = await self.pool.evaluate(task, solution, self._local(config) if config else None)
        return result.to_dict()

    def describe(self) -> dict:
        import os
        import platform

        return {"host": platform.node(), "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                "slots": len(self.pool.slots), "cache_dir": self.cache_dir}


class EvalService:
    def __init__(self, address: str | None = "auto", config: EvalConfig | None = None, *,
                 per_device: int | None = None, actors: int | None = None, cache_dir: str | None = None,
                 init_options: dict | None = None):
        """`address`: a Ray cluster ("auto", "ray://host:10001") or "local" for a fresh local one.
        `actors`: how many (default: one per GPU of the cluster; 1 on the CPU backend)."""
        ray = _ray()
        self.config = config or EvalConfig()
        self.backend = self.config.resolved_backend() if self.config.backend else "cuda"
        self._started_ray = False
        if not ray.is_initialized():
            ray.init(address=None if address in (None, "local") else address, **(init_options or {}))
            self._started_ray = True
        if actors is None:
            actors = int(ray.cluster_resources().get("GPU", 0)) if self.backend == "cuda" else 1
        if actors < 1:
            raise RuntimeError("the Ray cluster has no GPU for the evaluation service (use the cpu backend, or "
                               "start the nodes with GPUs)")
        resources = {"num_gpus": 1} if self.backend == "cuda" else {"num_cpus": 1}
        slots = max(1, per_device or (3 if self.backend == "cuda" else 1))
        remote = ray.remote(**resources)(DeviceEvaluator).options(max_concurrency=slots + 2)
        settings = replace(self.config, backend=self.backend).to_dict()
        self.actors = [remote.remote(settings, slots, cache_dir) for _ in range(actors)]
        self.in_flight = [0] * len(self.actors)
        self.capacity = slots * len(self.actors)

    def describe(self) -> list[dict]:
        return _ray().get([a.describe.remote() for a in self.actors])

    async def evaluate(self, task: Task, solution: Solution, config: EvalConfig | None = None) -> EvalResult:
        index = min(range(len(self.actors)), key=self.in_flight.__getitem__)   # the least busy actor
        self.in_flight[index] += 1
        try:
            sent = replace(config, backend=config.backend or self.backend).to_dict() if config else None
            answer = await self.actors[index].evaluate.remote(task, solution, sent)
            return EvalResult.from_dict(answer)
        finally:
            self.in_flight[index] -= 1

    async def evaluate_many(self, jobs) -> list[EvalResult]:
        return await asyncio.gather(*(self.evaluate(t, s) for t, s in jobs))

    def shutdown(self) -> None:
        ray = _ray()
        for actor in self.actors:
            ray.kill(actor)
        self.actors = []
        if self._started_ray:
            ray.shutdown()
