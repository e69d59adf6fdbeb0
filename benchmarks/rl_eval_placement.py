"""Check a cluster's RL layout: the GPUs the evaluation service's actors get are not the trainer's.

A placement group of `--train-gpus` one-GPU bundles stands for verl's (created first, as verl
does); then the evaluation service starts as a stage starts it (`EpisodeSettings.service`:
`--eval-gpus K` actors of one Ray GPU each, or `--resource R` for GPUs advertised under a custom
resource) and every actor reports the GPU it sees. Prints one JSON line; exits 1 on any overlap.

    python benchmarks/rl_eval_placement.py --train-gpus 6 --eval-gpus 2           # one node of 8
    python benchmarks/rl_eval_placement.py --address auto --train-gpus 8 --resource cuda_agent_eval_gpu

Without --address it starts a local Ray with --ray-gpus GPUs (and --ray-resource units of the resource).
"""

from __future__ import annotations

import argparse
import json
import os
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default=None, help="a running Ray cluster (default: start a local one)")
    parser.add_argument("--train-gpus", type=int, required=True)
    parser.add_argument("--eval-gpus", type=int, default=0)
    parser.add_argument("--resource", default=None)
    parser.add_argument("--devices", default=None, help="physical GPUs of each evaluation node, e.g. 1,2")
    parser.add_argument("--ray-gpus", type=int, default=None, help="local Ray: GPUs it may hand out")
    parser.add_argument("--ray-resource", type=int, default=0, help="local Ray: units of --resource")
    args = parser.parse_args()

    import ray
    from ray.util.placement_group import placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from cuda_agent.env.config import EvalConfig
    from cuda_agent.env.infra.service import EvalService

    if args.address:
        ray.init(address=args.address)
    else:
        resources = {args.resource: args.ray_resource} if args.resource and args.ray_resource else None
        cpus = max(os.cpu_count() or 1, 2 * (args.train_gpus + args.eval_gpus + args.ray_resource + 1))
        ray.init(num_cpus=cpus, num_gpus=args.ray_gpus, resources=resources, include_dashboard=False,
                 log_to_driver=False)

    @ray.remote(num_gpus=1)
    def trainer_gpu():
        return os.environ.get("CUDA_VISIBLE_DEVICES")

    group = placement_group([{"GPU": 1, "CPU": 1}] * args.train_gpus, strategy="PACK")
    ray.get(group.ready(), timeout=120)
    trainer = ray.get([trainer_gpu.options(scheduling_strategy=PlacementGroupSchedulingStrategy(group, i)).remote()
                       for i in range(args.train_gpus)])
    devices = [int(d) for d in args.devices.split(",")] if args.devices else None
    placement = ({"gpu_resource": args.resource, "devices": devices} if args.resource
                 else {"actors": args.eval_gpus})
    service = EvalService("auto", EvalConfig(backend="cuda"), name="placement-check", **placement)
    actors = service.describe()
    evaluation = [a["gpu"] for a in actors]
    overlap = sorted(set(trainer) & set(evaluation))
    print(json.dumps({"trainer_gpus": trainer, "evaluation_gpus": evaluation, "hosts": sorted({a["host"] for a in actors}),
                      "overlap": overlap, "placement": placement}))
    service.shutdown()
    return 1 if overlap or len(set(evaluation)) != len(evaluation) else 0


if __name__ == "__main__":
    sys.exit(main())
