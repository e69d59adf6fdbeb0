"""The 14 KernelBench level-1 tasks with 6-8 GiB inputs, each evaluated once on one GPU: its wall
time, verdict, times, and the GPU memory in use at its peak.

    python benchmarks/large_tasks.py --kernelbench ../shared/kernelbench [--budget 400] [--no-compile] [KEY ...]

Each task is scored with its hand-written solution in benchmarks/kernelbench_solutions/ (or, where
there is none, the reference itself with the guard off). All solutions are built first, side by side
(`stop_after="compile"`: nvcc and the torch headers once per machine), then the evaluations run one
after the other (two at once would not fit an 80 GB GPU), with the default configuration (strict
protocol, eager and torch.compile baselines) unless told otherwise. No task is started after
`--budget` seconds; those left are listed: name them (KEY ...) in a second run, whose builds are
then cached.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
SOLUTIONS = ROOT / "benchmarks" / "kernelbench_solutions"
LARGE = ["level1/19", "level1/20", "level1/21", "level1/22", "level1/23", "level1/24", "level1/25", "level1/26",
         "level1/29", "level1/32", "level1/36", "level1/38", "level1/39", "level1/47"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("keys", nargs="*", default=LARGE)
    parser.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"))
    parser.add_argument("--cache", default=None, help="cache folder (default: the project's)")
    parser.add_argument("--budget", type=float, default=400.0, help="start no task after this many seconds")
    parser.add_argument("--no-compile", action="store_true", help="no torch.compile baseline")
    args = parser.parse_args()

    from cuda_agent.env import EvalConfig, evaluate
    from cuda_agent.env.infra.capacity import needed_bytes
    from cuda_agent.tasks import Solution, load_solution, load_task
    from cuda_agent.env.infra.task_child import estimate_footprint
    from cuda_agent.tasks.footprint import human_bytes
    from tests.gpu.large import MemoryWatch, describe

    begun = time.perf_counter()
    settings = dict(backend="cuda", compile_baseline=not args.no_compile)
    if args.cache:
        settings["cache_dir"] = Path(args.cache)
    runs = []
    for key in args.keys:
        task = load_task(key, args.kernelbench)
        folder = SOLUTIONS / key
        if (folder / "model_new.py").exists():
            runs.append((key, task, load_solution(folder), EvalConfig(**settings)))
        else:   # the reference as its own solution: nothing of its own to build, so no guard
            code = task.code.replace("class Model(", "class ModelNew(")
            runs.append((key, task, Solution.from_code(code), EvalConfig(**settings, guard=False)))

    def build(run):
        key, task, solution, config = run
        start = time.perf_counter()
        result = evaluate(task, solution, config, stop_after="compile")
        return key, time.perf_counter() - start, result.error

    with ThreadPoolExecutor(8) as pool:
        for key, seconds, error in pool.map(build, runs):
            print(f"built {key} in {seconds:.1f} s" + (f": {error.phase}: {error.message[:300]}" if error else ""),
                  flush=True)
    print(f"builds done at {time.perf_counter() - begun:.1f} s\n", flush=True)

    rows = []
    for key, task, solution, config in runs:
        if time.perf_counter() - begun > args.budget:
            rows.append((key, None, "not started (budget)", "", ""))
            continue
        fp = estimate_footprint(task)
        need = needed_bytes(fp, "cuda", config.num_correct_trials)
        start = time.perf_counter()
        with MemoryWatch() as watch:
            result = evaluate(task, solution, config)
        wall = time.perf_counter() - start
        print(f"== {key} ({task.name}): inputs {human_bytes(fp.input_bytes)}, output "
              f"{human_bytes(fp.output_bytes or 0)}, model {human_bytes(need.device)} on the GPU\n"
              + describe(result, wall, watch), flush=True)
        verdict = "correct" if result.correct and result.error is None else \
            f"{result.error.phase}/{result.error.rule}" if result.error else "incorrect"
        speedup = f"{result.speedup_vs_eager:.2f}x" if result.speedup_vs_eager else ""
        peak = f"{watch.peak_mib / 1024:.1f} GiB (model {need.device / (1 << 30):.1f})" if watch.peak_mib else ""
        rows.append((key, wall, verdict, speedup, peak))

    print("\n| task | wall (s) | verdict | vs eager | GPU memory peak |\n|---|---|---|---|---|")
    for key, wall, verdict, speedup, peak in rows:
        print(f"| {key} | {'' if wall is None else f'{wall:.1f}'} | {verdict} | {speedup} | {peak} |")
    print(f"\ntotal {time.perf_counter() - begun:.1f} s", flush=True)


if __name__ == "__main__":
    main()
