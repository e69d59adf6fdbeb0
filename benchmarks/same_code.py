"""The reference against itself: each task's own code handed in as its solution, so a fair measure
says about 1.0x and reward 1. A speedup far from 1 is a bias of the harness between its two sides
(the judge's eager run and the candidate's), not of any kernel.

    python benchmarks/same_code.py [--backend cpu|cuda] [--evals 2] [KEY[@SCALE] ...]

Default tasks: on the CPU, small memory- and compute-bound KernelBench tasks scaled down; on the GPU,
the same at their full size. Each row: the task, every evaluation's paired speedup and reward, and
their median; the last line the median over all. `--plain` (CPU): after each evaluation, the
reference timed in a fresh plain process with the CPU workers' settings (`plain_ms`), beside the
judge's eager median: where the two part, the judge's side has drifted, not the kernel.
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


PLAIN = """
import statistics, sys, time, torch
torch.set_num_threads(1)
ns = {}
exec(open(sys.argv[1]).read(), ns)
model = ns["Model"](*ns["get_init_inputs"]()).eval()
times = []
with torch.no_grad():
    for _ in range(int(sys.argv[2])):
        inputs = ns["get_inputs"]()
        start = time.thread_time()
        out = model(*inputs)
        times.append((time.thread_time() - start) * 1e3)
        del out   # freed after the clock, as the judge frees its output (a perturbed heap fills it on free)
print(statistics.median(times))
"""


def plain_ms(task, calls: int = 40) -> float:
    """The task's reference, its median CPU time over `calls` fresh draws, in a fresh process with
    the CPU workers' settings (one thread, the same allocator settings) and nothing of the harness."""
    import os
    import subprocess
    import tempfile

    from cuda_agent.env.infra.isolation import CPU_WORKER_ENV

    env = {**os.environ, **CPU_WORKER_ENV}
    with tempfile.NamedTemporaryFile("w", suffix=".py") as code:
        code.write(task.code)
        code.flush()
        out = subprocess.run([sys.executable, "-c", PLAIN, code.name, str(calls)], env=env, capture_output=True,
                             text=True, check=True)
    return float(out.stdout.split()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tasks", nargs="*")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--evals", type=int, default=2)
    parser.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"))
    parser.add_argument("--plain", action="store_true", help="CPU: the reference in a plain process after each evaluation")
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
            if args.plain and backend == "cpu":
                print(f"{item:22s} speedup {result.speedup_vs_eager:.3f}  eager {result.eager_ms:.3f} ms  "
                      f"plain {plain_ms(task):.3f} ms  kernel {result.kernel_ms:.3f} ms", flush=True)
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
