"""Agent-iteration turnaround: compile + verify + profile wall time for kernel-only edits.

Measured in one run, on the embedded bias+ReLU task, each line printed as soon as it is known:
  toolchain    precompiling torch/extension.h, once per machine and toolchain
  cold         first evaluation of a workspace solution (binding and kernel built); the task's
               eager and torch.compile baselines, timed once per task and then cached, are
               shown but not counted
  ours         kernel-only edits of the workspace form (only the .cu recompiles), prewarmed workers
  plain        a kernel-only edit of the single-file form through torch's own load_inline in a
               fresh build folder, as KernelBench-style harnesses and the published workspace do
  ours inline  the same single-file form through our builder: first build, then a kernel edit

    python benchmarks/turnaround.py [--backend cuda] [--edits 5] [--plain-edits 1] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.env import EvalConfig, evaluate
from cuda_agent.env.builds.toolchain import prepare_toolchain
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


class Recorder:
    def __init__(self, path: Path | None):
        self.path, self.rows = path, {}

    def add(self, name: str, seconds: float, detail: str = "") -> None:
        self.rows.setdefault(name, []).append(seconds)
        print(f"  {name:36s} {seconds:7.2f} s  {detail}", flush=True)
        if self.path:
            self.path.write_text(json.dumps(self.rows, indent=1))

    def median(self, name: str) -> float:
        return statistics.median(self.rows[name])


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
    parser.add_argument("--plain-edits", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-inline", action="store_true",
                        help="skip our builder on the single-file form (its .cu includes torch headers: ~1 min per build under nvcc)")
    args = parser.parse_args()

    task = load_task(EXAMPLE / "model.py")
    cache = Path(tempfile.mkdtemp(prefix="turnaround-cache-"))
    base = dict(backend=args.backend, cache_dir=cache, compile_baseline=True)
    backend = EvalConfig(**base).resolved_backend()
    rec = Recorder(args.json)
    print(f"turnaround on {backend} (wall seconds per evaluation: compile + verify + profile)", flush=True)

    start = time.perf_counter()
    prepare_toolchain(backend, cache / "build")
    rec.add("toolchain: precompiled header", time.perf_counter() - start, "(once per machine)")
    wall, phases = timed(task, workspace_edit(backend, 0), EvalConfig(**base))
    baselines = phases.get("baselines", 0.0)  # eager and torch.compile timings: once per task, then cached
    rec.add("cold: first workspace build", wall - baselines,
            "(compile + verify + profile; " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + ")")

    warm = EvalConfig(**base, prewarm=True)
    timed(task, workspace_edit(backend, 0), warm)  # starts the first spare worker pair
    for i in range(1, args.edits + 1):
        wall, phases = timed(task, workspace_edit(backend, i), warm)
        rec.add("ours: workspace kernel edit", wall, "(" + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()) + ")")
    plain = EvalConfig(**base, fast_build=False)
    for i in range(1, args.plain_edits + 1):
        rec.add("plain load_inline rebuild", timed(task, inline_edit(backend, i), plain)[0])
    if not args.no_inline:
        rec.add("ours: load_inline first build", timed(task, inline_edit(backend, 0), warm)[0])
        rec.add("ours: load_inline kernel edit", timed(task, inline_edit(backend, 1), warm)[0])

    ours, plain_median = rec.median("ours: workspace kernel edit"), rec.median("plain load_inline rebuild")
    print(f"  median workspace kernel edit {ours:.2f} s; plain load_inline rebuild {plain_median:.2f} s; "
          f"ratio {plain_median / ours:.1f}x", flush=True)
    if not args.no_inline:
        print(f"  our load_inline kernel edit vs plain: "
              f"{plain_median / rec.median('ours: load_inline kernel edit'):.1f}x", flush=True)


if __name__ == "__main__":
    main()
