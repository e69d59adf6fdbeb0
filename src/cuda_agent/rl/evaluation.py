"""The evaluation service an RL stage scores with: `cuda_agent.env.infra.service.EvalService`'s Ray
actors on GPUs of their own, never the rollout's (Ray hides no GPU from an actor that asks for none,
so an evaluation in a rollout worker would time kernels on GPUs vLLM is using).

Placement (`EpisodeSettings.service`, from `cuda-agent train --eval-gpus` / `--eval-resource`):
`{"actors": K}` is K one-GPU actors on GPUs the trainer's placement groups leave out; `{"gpu_resource":
R, "devices": [...]}` one actor per unit of the custom resource R, each on one GPU of nodes started
with `--num-gpus=0 --resources='{"R": 8}'`. Either takes a `name`, sharing the actors run-wide.
"""

from __future__ import annotations

import json


def service_client(key: str):
    """The Ray service client for `EpisodeSettings.service_key()` (called once per process)."""
    from cuda_agent.env.infra.service import EvalService
    from cuda_agent.rl.episode import eval_config

    spec = json.loads(key)
    placement = dict(spec["placement"])
    known = {"actors", "per_device", "gpu_resource", "devices", "name", "address", "cache_dir"}
    unknown = set(placement) - known
    if unknown:
        raise ValueError(f"unknown evaluation service placement: {', '.join(sorted(unknown))}")
    address = placement.pop("address", "auto")
    return EvalService(address, eval_config(spec["eval"]), **placement)


def placement(run_gpus: int, eval_gpus: int, nodes: int, resource: str | None, name: str) -> dict | None:
    """The stage's placement: separate evaluation nodes (`resource`), or `eval_gpus` of each of the
    `nodes` training nodes; None (evaluate in the rollout worker) only when asked for with 0 GPUs."""
    if resource:
        return {"gpu_resource": resource, "name": name}
    if eval_gpus <= 0:
        return None
    if eval_gpus >= run_gpus:
        raise ValueError(f"--eval-gpus {eval_gpus} leaves no GPU of the {run_gpus} per node for training")
    return {"actors": eval_gpus * nodes, "name": name}
