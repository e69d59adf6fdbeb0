"""How much the environment's timings move between evaluations of the same kernel (GPU).

    python benchmarks/timing_fidelity.py [--runs 10] [--kernelbench DIR] [--hold on,off] [--precision 0.75,0]
                                         [--in-flight 3] [--settle 0,2] [--json out.json]

Evaluates each honest kernel `--runs` times (a fresh judge and candidate each time, builds cached, after
one evaluation not counted; under each `--hold` setting (EvalConfig.hold: timed calls queued behind the
device hold, env/measure/hold.py, or not: the same-run baseline), each `--precision` (EvalConfig.precision in
percent: timing stops once the medians are that precise; 0 times all 100 calls) and `--settle` value of
EvalConfig.settle_ms in turn; with `--in-flight N`, the `--runs` evaluations of each setting go
through one pool N at a time instead, the load an RL run or a bench run puts on the GPU) and
prints, per kernel, the spread (max - min) / median of kernel_ms, of speedup_vs_eager and of
speedup_vs_compile (and of the speedup as a ratio of the two medians, for comparison with the paired
per-call ratios the environment reports), beside a second timer on the same kernel: its device time from the PyTorch
profiler (CUDA kernels only, summed per forward, median over calls on fresh inputs), and KernelBench's
own method (CUDA events around the call, 100 trials on one input set, no cache flush). Targets
(issue: timing you can trust): spread at most 2 % for kernels of 0.1 ms and more.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cuda_agent.env.measure.stats import spread  # noqa: E402  (after the path: tests.* is imported from ROOT too)

FIDELITY = Path(__file__).resolve().parent / "fidelity"

# CLOCK_CHECK=0 turns the clock cross-check off (it changes no timing, only whether a run is rejected)
_CLOCK_CHECK = __import__("os").environ.get("CLOCK_CHECK", "1") != "0"


def kernels(kernelbench: Path | None):
    """(label, task, solution) for honest kernels from ~0.01 ms to ~3 ms."""
    from cuda_agent.tasks import load_solution, load_task
    from tests.env.helpers import EXAMPLES, example_task
    from tests.gpu.helpers import workspace

    elementwise = load_solution(EXAMPLES / "solution_cuda")
    found = [("elementwise, example size", example_task(), elementwise),
             ("elementwise 8192x8192", load_task(FIDELITY / "bias_relu_large.py"), elementwise),
             ("hinge loss 64M", load_task(FIDELITY / "hinge_large.py"), workspace("hinge")),
             ("SGEMM 2048 (cuBLAS)", load_task(FIDELITY / "sgemm_2048.py"), workspace("gemm", "level1_matmul.py"))]
    if kernelbench:
        found.append(("level2/76 GEMM+bias+ReLU", load_task("level2/76", kernelbench),
                      workspace("gemm", "level2_gemm_add_relu.py")))
    return found


def second_timers(task, solution, cache_dir: Path, calls: int = 50) -> dict:
    """The same kernel in this process: device time from the profiler, and KernelBench's event timing."""
    import torch

    from cuda_agent.env.builds.compiler import build_extension, load_module
    from cuda_agent.env.workers.draws import draw_inputs
    from cuda_agent.tasks.task import load_task_module

    so = build_extension("cuda_extension", solution.kernel_files, "cuda", cache_dir / "build").path
    sys.modules["cuda_extension"] = load_module("cuda_extension", so)
    module = load_task_module(task.code, f"fidelity_task_{abs(hash(task.name))}")
    mod_new = load_task_module(solution.files["model_new.py"], f"fidelity_new_{abs(hash(task.name))}")
    device = torch.device("cuda")
    torch.manual_seed(0)
    reference = module.Model(*module.get_init_inputs()).to(device).eval()
    model = mod_new.ModelNew(*module.get_init_inputs()).to(device).eval()
    try:
        model.load_state_dict(reference.state_dict())
    except (RuntimeError, KeyError):
        pass
    draws = [draw_inputs(module, 1000 + i, device) for i in range(3)]
    with torch.no_grad():
        for args in draws:
            model(*args)
        torch.cuda.synchronize()
        # the profiler: CUDA kernel time per forward, fresh (rotating) inputs
        per_call = []
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for i in range(calls):
                with torch.profiler.record_function(f"call_{i}"):
                    model(*draws[i % len(draws)])
                torch.cuda.synchronize()
        events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
        total_us = sum(getattr(e, "self_device_time_total", None) or getattr(e, "self_cuda_time_total", 0) for e in events)
        per_call.append(total_us / calls / 1000.0)
        # KernelBench's method: events around each call, 100 trials, one input set, no flush
        args = draws[0]
        trials = []
        for _ in range(100):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            model(*args)
            end.record()
            torch.cuda.synchronize()
            trials.append(start.elapsed_time(end))
    # kernelbench_spread: (max - min) / median over its 100 trials in this one run
    return {"profiler_ms": per_call[0], "kernelbench_ms": statistics.mean(trials),
            "kernelbench_spread": spread(trials)}


def cross_check(label: str, task, solution, cache: Path, rows: list[dict]) -> dict:
    """The second timers for a kernel (once per kernel, whatever the settle values compared)."""
    for earlier in rows:
        if earlier["kernel"] == label and "profiler_ms" in earlier:
            return {k: earlier[k] for k in ("profiler_ms", "kernelbench_ms", "kernelbench_spread")}
    try:
        # in a fresh process each: every kernel's extension is named cuda_extension, and a process
        # keeps the first module of a name it loaded (the hinge row timed the elementwise kernel)
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as one:
            return one.submit(second_timers, task, solution, cache).result()
    except Exception as exc:  # the cross-check is informative; never lose the main figures to it
        return {"second_timer_error": f"{type(exc).__name__}: {exc}"[:300]}


def main() -> None:
    import torch

    from cuda_agent.env import EvalConfig, evaluate
    from cuda_agent.env.config import default_cache_dir

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--kernelbench", type=Path, default=None)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--only", default="", help="comma-separated label prefixes to run")
    parser.add_argument("--hold", default="on,off", help="comma-separated EvalConfig.hold settings to compare "
                                                         "(on: held timing, off: the method before it)")
    parser.add_argument("--precision", default="0.75", help="comma-separated EvalConfig.precision settings in "
                                                           "percent to compare (0: every timed call)")
    parser.add_argument("--in-flight", type=int, default=1,
                        help="evaluations at once through one pool (default 1: one after another, the settings "
                             "taking turns)")
    parser.add_argument("--settle", default="0", help="comma-separated EvalConfig.settle_ms values to compare "
                                                      "(each kernel is evaluated --runs times under each)")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("timing_fidelity.py needs a CUDA GPU")
    cache = default_cache_dir()
    rows = []
    holds = [h == "on" for h in args.hold.split(",")]
    settings = [(hold, float(p)) for hold in holds for p in args.precision.split(",")]   # (hold, precision %)
    plan = [(label, task, solution, float(settle)) for label, task, solution in kernels(args.kernelbench)
            if not args.only or any(label.startswith(p) for p in args.only.split(","))
            for settle in args.settle.split(",")]
    for label, task, solution, settle in plan:
        configs = {(hold, p): EvalConfig(backend="cuda", cache_dir=cache, prewarm=2, clock_check=_CLOCK_CHECK,
                                         settle_ms=settle, hold=hold, precision=p / 100 or None)
                   for hold, p in settings}
        # one evaluation per setting first, not counted: its build, and torch.compile's time stored for it
        warm = {hold: evaluate(task, solution, config) for hold, config in configs.items()}
        failed = [f"{label}: {r.error}" for r in warm.values() if not r.correct]
        if failed:
            print("\n".join(failed), flush=True)
            continue
        # the settings take turns, evaluation by evaluation, so the machine's drift reaches them alike
        results = {setting: [] for setting in settings}
        seconds = {setting: 0.0 for setting in settings}
        if args.in_flight > 1:   # under load instead: --runs evaluations, --in-flight at once, per setting
            for setting, config in configs.items():
                results[setting], seconds[setting] = under_load(task, solution, config, args.runs, args.in_flight)
        for _ in range(args.runs if args.in_flight <= 1 else 0):
            for setting, config in configs.items():
                started = time.monotonic()
                r = evaluate(task, solution, config)
                seconds[setting] += time.monotonic() - started
                if not r.correct:
                    print(f"{label}: {r.error}", flush=True)
                    continue
                results[setting].append(r)
        for setting in settings:
            hold, precision = setting
            if results[setting]:
                row = fidelity_row(label, hold, settle, results[setting], seconds[setting])
                row["precision_percent"], row["in_flight"] = precision, args.in_flight
                row.update(cross_check(label, task, solution, cache, rows))
                if row.get("profiler_ms"):
                    row["ours_vs_profiler"] = row["kernel_ms"] / row["profiler_ms"] - 1
                rows.append(row)
                print(f"{label:28s} {'held  ' if hold else 'unheld'} precision {precision:g} % "
                      f"({row['timed_calls']:g} timed calls) settle {settle:g} ms  kernel {row['kernel_ms']:.4f} ms  "
                      f"spread {row['spread_kernel_ms']:.2%}  vs eager {row['spread_speedup_vs_eager']:.2%} (ratio of "
                      f"medians {row['spread_median_ratio_vs_eager']:.2%})  vs compile "
                      f"{row['spread_speedup_vs_compile']:.2%}  eager {row['eager_ms']:.4f} ms spread "
                      f"{row['spread_eager_ms']:.2%}  profiler {row.get('profiler_ms', float('nan')):.4f} ms  "
                      f"kernelbench {row.get('kernelbench_ms', float('nan')):.4f} ms  ({row['seconds_per_eval']:.1f} s/eval)",
                      flush=True)
        if args.json:
            args.json.write_text(json.dumps(rows, indent=1))


def under_load(task, solution, config, runs: int, in_flight: int) -> tuple[list, float]:
    """`runs` evaluations through one pool, `in_flight` at a time (as an RL rollout or a bench run
    submits them): the correct results and the wall time, after one untimed round that starts its spares."""
    import asyncio

    from cuda_agent.env import EvalPool

    pool = EvalPool(replace(config, prewarm=in_flight), gpus=[0], per_device=in_flight)
    asyncio.run(pool.evaluate_many([(task, solution)] * in_flight))
    started = time.monotonic()
    done = asyncio.run(pool.evaluate_many([(task, solution)] * runs))
    seconds = time.monotonic() - started
    for r in done:
        if not r.correct:
            print(f"{task.name}: {r.error}", flush=True)
    return [r for r in done if r.correct], seconds


def fidelity_row(label: str, hold: bool, settle: float, results: list, seconds: float) -> dict:
    return {"kernel": label, "hold": hold, "timer": results[-1].timer, "settle_ms": settle, "runs": len(results),
            "seconds_per_eval": seconds / len(results),
            "timed_calls": statistics.median(r.timings["kernel"].iters for r in results),
            "kernel_ms": statistics.median(r.kernel_ms for r in results),
            "eager_ms": statistics.median(r.eager_ms for r in results),
            "compile_ms": statistics.median(r.compile_ms for r in results if r.compile_ms) if any(
                r.compile_ms for r in results) else None,
            "spread_kernel_ms": spread([r.kernel_ms for r in results]),
            "spread_eager_ms": spread([r.eager_ms for r in results]),
            "spread_speedup_vs_eager": spread([r.speedup_vs_eager for r in results]),
            "spread_speedup_vs_compile": spread([r.speedup_vs_compile or 0 for r in results]),
            # the speedup as a ratio of the two medians (before speedups were paired call by call)
            "spread_median_ratio_vs_eager": spread([r.eager_ms / r.kernel_ms for r in results]),
            "per_eval": [{"kernel_ms": r.kernel_ms, "eager_ms": r.eager_ms, "compile_ms": r.compile_ms,
                          "speedup_vs_eager": r.speedup_vs_eager, "speedup_vs_compile": r.speedup_vs_compile,
                          "baseline": r.baseline_source, "seconds": sum(r.phase_seconds.values()),
                          "phase_seconds": r.phase_seconds,
                          # every statistic of the timed calls (min and mean beside the median)
                          "kernel_timing": r.timings["kernel"].__dict__, "eager_timing": r.timings["eager"].__dict__}
                         for r in results]}

if __name__ == "__main__":
    main()
