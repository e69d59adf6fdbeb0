"""The reference against itself: each task's own code handed in as its solution, so a fair measure
says about 1.0x and reward 1. A speedup far from 1 is a bias of the harness between its two sides
(the judge's eager run and the candidate's), not of any kernel.

    python benchmarks/same_code.py [--backend cpu|cuda] [--evals 2] [KEY[@SCALE] ...]

Default tasks: on the CPU, small memory- and compute-bound KernelBench tasks scaled down; on the GPU,
the same at their full size. Each row: the task, every evaluation's paired speedup and reward, and
their median; the last line the median over all.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CPU_TASKS = ["level1/23@0.03125", "level1/19@0.03125", "level1/1@0.25", "level1/36@0.03125", "level2/86@0.125"]
GPU_TASKS = ["level1/23@0.25", "level1/19@0.25", "level1/1", "level1/36@0.25", "level2/86", "level1/40"]


def as_solution(task):
    """The task's own code as `ModelNew`: nothing of its own to build, so the guard is off."""
    from cuda_agent.tasks import Solution

    return Solution.from_code(re.sub(r"\bModel\b", "ModelNew", task.code))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--evals", type=int, default=2)
    parser.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"))
    args = parser.parse_args()

    from cuda_agent.env import EvalConfig, evaluate
    from cuda_agent.tasks import load_task
    from cuda_agent.tasks.scale import scale_task

    backend = EvalConfig(backend=args.backend).resolved_backend()
    keys = args.tasks or (GPU_TASKS if backend == "cuda" else CPU_TASKS)
    everything = []
    for item in keys:
        key, _, scale = item.partition("@")
        task = load_task(key, args.kernelbench)
        if scale:
            task = scale_task(task, float(scale)).task
        speedups, rewards = [], []
        for _ in range(args.evals):
            result = evaluate(task, as_solution(task), EvalConfig(backend=backend, guard=False))
            if not result.correct:
                print(f"{item}: {result.error.phase}: {result.error.message.splitlines()[0][:200]}", flush=True)
                break
            speedups.append(result.speedup_vs_eager)
            rewards.append(result.reward)
        if speedups:
            everything += speedups
            print(f"{item:22s} speedups {' '.join(f'{s:.3f}' for s in speedups)}  rewards {rewards}  "
                  f"median {statistics.median(speedups):.3f}", flush=True)
    if everything:
        print(f"all: median {statistics.median(everything):.3f}, range {min(everything):.3f}-{max(everything):.3f} "
              f"over {len(everything)} evaluations ({backend})")
    else:
        sys.exit("no evaluation finished")


if __name__ == "__main__":
    main()
