"""Agent-iteration turnaround: compile + verify + profile wall time for kernel-only edits.

Measured in one run, on the embedded bias+ReLU task:
  cold         first evaluation with an empty cache (toolchain header precompiled, binding built)
  cold binding a new solution whose binding is not cached yet (toolchain warm)
  ours         kernel-only edits of the workspace form (only the .cu recompiles), prewarmed workers
  ours inline  kernel-only edits of the single-file load_inline form through our builder
  plain        the same single-file edits through torch's own load_inline in a fresh build folder,
               as KernelBench-style harnesses and the published workspace do

    python benchmarks/turnaround.py [--backend cuda] [--edits 5] [--plain-edits 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.env import EvalConfig, evaluate
from cuda_agent.tasks import Solution, load_solution, load_task

EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "cuda_agent" / "examples" / "bias_relu"
BLOCK_SIZES = [128, 512, 64, 1024, 192, 384, 640, 896, 160, 320]


def workspace_edit(backend: str, i: int) -> Solution:
    """A kernel-only edit: a different block size in the kernel file, binding untouched."""
    solution = load_solution(EXAMPLE / ("solution_cuda" if backend == "cuda" else "solution_cpu"))
    files = dict(solution.files)
    if backend == "cuda":
        path = "kernels/bias_relu.cu"
        files[path] = files[path].replace("int threads = 256;", f"int threads = {BLOCK_SIZES[i]};")
    else:
        path = "kernels/bias_relu.cpp"
        files[path] = files[path] + f"\n// edit {i}\nstatic const int unroll_hint_{i} = {BLOCK_SIZES[i]};\n"
    assert files[path] != solution.files[path]
    return Solution(files)


def inline_edit(backend: str, i: int) -> Solution:
    name = "solution_cuda_inline.py" if backend == "cuda" else "solution_cpu_inline.py"
    code = (EXAMPLE / name).read_text()
    if backend == "cuda":
        edited = code.replace("(n + 255) / 256, 256,", f"(n + {BLOCK_SIZES[i] - 1}) / {BLOCK_SIZES[i]}, {BLOCK_SIZES[i]},")
    else:
        edited = code.replace('return out;\n}\n"""', f'return out;\n}}\n// edit {i}\n"""')
    assert edited != code
    return Solution.from_code(edited)


def timed(task, solution, config) -> tuple[float, dict]:
    start = time.perf_counter()
    result = evaluate(task, solution, config)
    wall = time.perf_counter() - start
    if not result.correct:
        raise SystemExit(f"benchmark solution failed: {result.error}")
    return wall, result.phase_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=None)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--inline-edits", type=int, default=3)
    parser.add_argument("--plain-edits", type=int, default=2)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    task = load_task(EXAMPLE / "model.py")
    cache = Path(tempfile.mkdtemp(prefix="turnaround-cache-"))
    base = dict(backend=args.backend, cache_dir=cache, compile_baseline=True)
    backend = EvalConfig(**base).resolved_backend()
    rows: dict[str, list[float]] = {}

    wall, phases = timed(task, workspace_edit(backend, 0), EvalConfig(**base))
    rows["cold (empty cache)"] = [wall]
    cold_compile = phases["compile"]
    rows["cold binding (toolchain warm)"] = [timed(task, load_solution(EXAMPLE / (
        "solution_cuda_inline.py" if backend == "cuda" else "solution_cpu_inline.py")), EvalConfig(**base))[0]]

    warm = EvalConfig(**base, prewarm=True)
    timed(task, workspace_edit(backend, 0), warm)  # starts the first spare pair
    rows["ours: workspace kernel edit"] = [timed(task, workspace_edit(backend, i), warm)[0]
                                          for i in range(1, args.edits + 1)]
    rows["ours: load_inline kernel edit"] = [timed(task, inline_edit(backend, i), warm)[0]
                                             for i in range(1, args.inline_edits + 1)]
    plain = EvalConfig(**base, fast_build=False)
    rows["plain load_inline rebuild"] = [timed(task, inline_edit(backend, i), plain)[0]
                                         for i in range(1, args.plain_edits + 1)]

    medians = {name: statistics.median(values) for name, values in rows.items()}
    ours, plain_median = medians["ours: workspace kernel edit"], medians["plain load_inline rebuild"]
    print(f"\nturnaround on {backend} (wall seconds per evaluation: compile + verify + profile)")
    for name, values in rows.items():
        print(f"  {name:34s} median {medians[name]:7.2f} s   runs {[round(v, 2) for v in values]}")
    print(f"  cold first build (compile phase)   {cold_compile:7.2f} s")
    print(f"  speedup, workspace edit vs plain load_inline rebuild: {plain_median / ours:.1f}x")
    print(f"  speedup, our load_inline edit vs plain load_inline:   "
          f"{plain_median / medians['ours: load_inline kernel edit']:.1f}x")
    if args.json:
        args.json.write_text(json.dumps({"backend": backend, "runs": rows, "medians": medians,
                                         "cold_compile_phase_s": cold_compile,
                                         "ratio_plain_over_ours": plain_median / ours}, indent=1))


if __name__ == "__main__":
    main()
