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
  build only   the workspace's kernel edit through the builder alone (compile, link, link check), as
               it builds now and as it built before (nvcc's steps one after the other, the default
               linker), alternating, with the seconds of each part

    python benchmarks/turnaround.py [--backend cuda] [--edits 5] [--plain-edits 1] [--build-edits 5]
                                    [--only-build] [--json out.json] [--logs DIR]
"""

from __future__ import annotations

import argparse
import json
import os
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

    def add(self, name: str, seconds: float, detail: str = "", quiet: bool = False) -> None:
        self.rows.setdefault(name, []).append(seconds)
        if not quiet:
            print(f"  {name:36s} {seconds:7.2f} s  {detail}", flush=True)
        if self.path:
            self.path.write_text(json.dumps(self.rows, indent=1))

    def median(self, name: str) -> float:
        return statistics.median(self.rows[name])


BEFORE = {"CUDA_AGENT_NVCC_STEPS": "0", "CUDA_AGENT_LINKER": "bfd"}   # how a kernel edit built before


def build_only(backend: str, cache: Path, i: int, before: bool, first: bool = False) -> tuple[float, dict]:
    """A kernel-only edit built by the builder alone, checked as evaluations check it (`first`: the
    binding may compile too)."""
    from cuda_agent.env.builds import compiler
    from cuda_agent.env.rules.symbols import check_library, toolchain_imports

    exempt = toolchain_imports(backend, str(cache))
    files = {p: t for p, t in workspace_edit(backend, i).files.items() if p.startswith("kernels/")}
    kernel = next(p for p in files if not p.endswith("_binding.cpp"))
    files[kernel] += f"\n// build-only edit {'before' if before else 'now'} {time.time_ns()}\n"   # never cached
    saved = {k: os.environ.get(k) for k in BEFORE}
    if before:
        os.environ.update(BEFORE)
    compiler.toolchain.cache_clear()   # the linker is chosen with the toolchain
    try:
        compiler.toolchain(backend)     # (chosen before the clock starts)
        start = time.perf_counter()
        report = compiler.build_extension("cuda_extension", files, backend, cache,
                                          check=lambda so, objects: check_library(so, objects, exempt))
        wall = time.perf_counter() - start
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        compiler.toolchain.cache_clear()
    assert first or report.compiled == [kernel], report.compiled
    return wall, report.seconds


def timed(task, solution, config, log: Path | None = None) -> tuple[float, dict]:
    start = time.perf_counter()
    result = evaluate(task, solution, config)
    wall = time.perf_counter() - start
    if log is not None:   # the workers' log (with CUDA_AGENT_TRACE_CALLS=1: each call's steps)
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(result.log or "")
    if not result.correct:
        raise SystemExit(f"benchmark solution failed: {result.error}")
    return wall, result.phase_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default=None)
    parser.add_argument("--edits", type=int, default=5)
    parser.add_argument("--plain-edits", type=int, default=1)
    parser.add_argument("--build-edits", type=int, default=5, help="kernel edits built by the builder alone, "
                        "now and as before (alternating); 0: none")
    parser.add_argument("--only-build", action="store_true", help="the toolchain and the build-only edits alone "
                        "(no evaluation: no GPU or sandbox needed)")
    parser.add_argument("--cache-dir", type=Path, default=None, help="default: a fresh folder (a cold toolchain)")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--logs", type=Path, default=None, help="folder for each warm edit's worker log")
    parser.add_argument("--no-inline", action="store_true",
                        help="skip our builder on the single-file form (its .cu includes torch headers: ~1 min per build under nvcc)")
    args = parser.parse_args()

    task = load_task(EXAMPLE / "model.py")
    cache = args.cache_dir or Path(tempfile.mkdtemp(prefix="turnaround-cache-"))
    base = dict(backend=args.backend, cache_dir=cache, compile_baseline=True)
    backend = EvalConfig(**base).resolved_backend()
    rec = Recorder(args.json)
    print(f"turnaround on {backend} (wall seconds per evaluation: compile + verify + profile)", flush=True)

    start = time.perf_counter()
    prepare_toolchain(backend, cache / "build")
    rec.add("toolchain: precompiled header", time.perf_counter() - start, "(once per machine)")
    if not args.only_build:
        wall, phases = timed(task, workspace_edit(backend, 0), EvalConfig(**base))
        baselines = phases.get("baselines", 0.0)  # eager and torch.compile timings: once per task, then cached
        rec.add("cold: first workspace build", wall - baselines,
                "(compile + verify + profile; " + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items()) + ")")

        warm = EvalConfig(**base, prewarm=True)
        timed(task, workspace_edit(backend, 0), warm)  # starts the first spare worker pair
        for i in range(1, args.edits + 1):
            log = args.logs / f"edit{i}.log" if args.logs else None
            wall, phases = timed(task, workspace_edit(backend, i), warm, log)
            rec.add("ours: workspace kernel edit", wall,
                    "(" + ", ".join(f"{k} {v:.2f} s" for k, v in phases.items()) + ")")
        plain = EvalConfig(**base, fast_build=False)
        for i in range(1, args.plain_edits + 1):
            rec.add("plain load_inline rebuild", timed(task, inline_edit(backend, i), plain)[0])
        if not args.no_inline:
            rec.add("ours: load_inline first build", timed(task, inline_edit(backend, 0), warm)[0])
            rec.add("ours: load_inline kernel edit", timed(task, inline_edit(backend, 1), warm)[0])

    if args.build_edits:
        build_only(backend, cache / "build", 0, before=False, first=True)   # the binding; each linker once
        build_only(backend, cache / "build", 0, before=True, first=True)
    for i in range(1, args.build_edits + 1):
        for before in (True, False):
            wall, parts = build_only(backend, cache / "build", i, before)
            rec.add(f"build only: kernel edit, {'before' if before else 'now'}", wall,
                    "(" + ", ".join(f"{k} {v:.2f} s" for k, v in parts.items()) + ")")
            for part, seconds in parts.items():
                rec.add(f"build only: {part}, {'before' if before else 'now'}", seconds, quiet=True)

    if "ours: workspace kernel edit" in rec.rows and "plain load_inline rebuild" in rec.rows:
        ours, plain_median = rec.median("ours: workspace kernel edit"), rec.median("plain load_inline rebuild")
        print(f"  median workspace kernel edit {ours:.2f} s; plain load_inline rebuild {plain_median:.2f} s; "
              f"ratio {plain_median / ours:.1f}x", flush=True)
    if args.build_edits:
        print("  build only, median: " + "; ".join(
            f"{when} {rec.median(f'build only: kernel edit, {when}'):.2f} s (" + ", ".join(
                f"{part} {rec.median(f'build only: {part}, {when}'):.2f}" for part in ("compile", "link", "check")
                if f"build only: {part}, {when}" in rec.rows) + ")" for when in ("before", "now")), flush=True)
    if "ours: load_inline kernel edit" in rec.rows and "plain load_inline rebuild" in rec.rows:
        print(f"  our load_inline kernel edit vs plain: "
              f"{rec.median('plain load_inline rebuild') / rec.median('ours: load_inline kernel edit'):.1f}x",
              flush=True)


if __name__ == "__main__":
    main()
