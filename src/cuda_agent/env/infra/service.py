"""Evaluation as a service for many clients, across machines, through Ray (optional extra `[ray]`).

    service = EvalService("auto", EvalConfig(prewarm=True))    # or "ray://head:10001", "local"
    result = await service.evaluate(task, solution)             # the EvalPool interface
    service.shutdown()

One actor per GPU of the cluster (on the CPU backend, `actors` CPU slots), each owning a pipelined
`EvalPool`; the client sends each evaluation to the actor with the fewest in flight. `gpu_resource`
places the actors only on GPUs a node advertises as that custom resource, so a trainer's placement
groups cannot take them; `name` makes them shared by every client with that name (docs/rl.md). Every
node needs cuda-agent (same version) and bubblewrap, and keeps its own build and baseline cache.
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

    def __init__(self, config: dict, per_device: int | None, cache_dir: str | None, device: int | None = None):
        import os

        from cuda_agent.env.config import default_cache_dir
        from cuda_agent.env.infra.pool import EvalPool

        if device is not None:   # placed by a custom resource: Ray assigned no GPU, this is ours
            os.environ["CUDA_VISIBLE_DEVICES"] = str(device)
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
                 init_options: dict | None = None, gpu_resource: str | None = None,
                 devices: list[int] | None = None, name: str | None = None):
        """`address`: a Ray cluster ("auto", "ray://host:10001") or "local" for a fresh local one.
        `actors`: how many (default: one per GPU of the cluster, or per unit of `gpu_resource`; 1
        on the CPU backend). `gpu_resource`, `name`: placement (see the module); `devices`: the physical
        GPUs of a `gpu_resource` node the actors take, one each (default 0, 1, ...)."""
        ray = _ray()
        self.config = config or EvalConfig()
        self.backend = self.config.resolved_backend() if self.config.backend else "cuda"
        self._started_ray = False
        if not ray.is_initialized():
            ray.init(address=None if address in (None, "local") else address, **(init_options or {}))
            self._started_ray = True
        slots = max(1, per_device or (3 if self.backend == "cuda" else 1))
        settings = replace(self.config, backend=self.backend).to_dict()
        if gpu_resource:
            places = _resource_places(ray, gpu_resource, devices)
            places = places[:actors] if actors else places
        else:
            if actors is None:
                actors = int(ray.cluster_resources().get("GPU", 0)) if self.backend == "cuda" else 1
            places = [None] * actors
        if not places:
            raise RuntimeError("the Ray cluster has no GPU for the evaluation service (use the cpu backend, or "
                               "start the nodes with GPUs" + (f" and the resource {gpu_resource}" if gpu_resource
                                                              else "") + ")")
        self.actors = [self._actor(ray, i, place, settings, slots, cache_dir, gpu_resource, name)
                       for i, place in enumerate(places)]
        self.in_flight = [0] * len(self.actors)
        self.capacity = slots * len(self.actors)

    def _actor(self, ray, index, place, settings, slots, cache_dir, gpu_resource, name):
        options: dict = {"max_concurrency": slots + 2}
        if name:
            options.update(name=f"{name}-{index}", namespace="cuda-agent", get_if_exists=True)
        if place is None:
            options.update({"num_gpus": 1} if self.backend == "cuda" else {"num_cpus": 1})
            return ray.remote(DeviceEvaluator).options(**options).remote(settings, slots, cache_dir)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        node, device = place
        options.update(num_gpus=0, num_cpus=1, resources={gpu_resource: 1},
                       scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False))
        return ray.remote(DeviceEvaluator).options(**options).remote(settings, slots, cache_dir, device)

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


def _resource_places(ray, resource: str, devices: list[int] | None) -> list[tuple[str, int]]:
    """(node id, physical GPU) for every unit of `resource` on the live nodes, node by node."""
    places = []
    for node in ray.nodes():
        units = int(node.get("Resources", {}).get(resource, 0)) if node.get("Alive") else 0
        chosen = list(devices)[:units] if devices is not None else list(range(units))
        places += [(node["NodeID"], d) for d in chosen]
    return places
