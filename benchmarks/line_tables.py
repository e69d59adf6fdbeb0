"""What the builds' line tables (compiler.LINE_TABLES; nvcc's -lineinfo) cost a kernel-only rebuild.

One fresh build cache, a cold build of the example's workspace (precompiled header, binding,
kernel), then `--edits` kernel-only edits, each built twice: with the toolchain's flags as they are
and without line tables (their objects are keyed by their commands: both share the binding, which
includes torch's headers and so has none), alternating which goes first, each built as an evaluation
builds it (compile, link, link-level check, the copy handed to the candidate). Printed: the medians
of wall and compiler CPU seconds, the median of the paired ratios (with line tables / without), the
cold build and the library sizes.

    python benchmarks/line_tables.py [--backend cpu|cuda] [--edits 16]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import resource
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.env.builds import compiler
from cuda_agent.env.rules.symbols import check_library
from cuda_agent.tasks import load_solution

EXAMPLE = Path(__file__).resolve().parents[1] / "src" / "cuda_agent" / "examples" / "bias_relu"


def without_lines(tc: compiler.Toolchain) -> compiler.Toolchain:
    return dataclasses.replace(tc, line_tables=(), cuda_flags=tuple(f for f in tc.cuda_flags if f != "-lineinfo"))


def check(library: Path, objects) -> None:
    findings = check_library(library, objects)
    assert not findings, findings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--edits", type=int, default=16)
    args = parser.parse_args()
    backend = args.backend
    real = compiler.toolchain(backend)
    assert real.line_tables, "the toolchain has no line tables to weigh"
    chains = {"lines": real, "plain": without_lines(real)}
    solution = load_solution(EXAMPLE / f"solution_{backend}")
    path = "kernels/bias_relu.cpp" if backend == "cpu" else "kernels/bias_relu.cu"
    root = Path(tempfile.mkdtemp(prefix="line-tables-"))
    wall = {name: [] for name in chains}
    cpu = {name: [] for name in chains}
    libraries = {}

    def build(name: str, files: dict) -> tuple[float, float, Path]:
        compiler.toolchain = lambda b: chains[name]
        before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        report = compiler.build_extension("cuda_extension", files, backend, root, check=check)
        shutil.copyfile(report.path, root / f"handed-{name}.so")
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        used = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
        return time.perf_counter() - started, used, report.path

    stamp = time.time_ns()
    cold = round(build("lines", dict(solution.files))[0], 2)
    for i in range(args.edits):
        files = dict(solution.files)
        files[path] += f"\n// edit {stamp} {i}\nstatic const int edit_{i} = {i};\n"
        for name in (("plain", "lines") if i % 2 == 0 else ("lines", "plain")):
            seconds, used, libraries[name] = build(name, files)
            wall[name].append(seconds)
            cpu[name].append(used)
    ratios = [a / b for a, b in zip(wall["lines"], wall["plain"])]
    print(json.dumps({
        "backend": backend, "edits": args.edits,
        "wall_median_s": {name: round(statistics.median(v), 4) for name, v in wall.items()},
        "compiler_cpu_median_s": {name: round(statistics.median(v), 4) for name, v in cpu.items()},
        "paired_wall_ratio_median": round(statistics.median(ratios), 4),
        # by which went first (the first of a pair writes the edit's source folder, the second reuses it)
        "paired_wall_ratio_median_by_order": {"plain first": round(statistics.median(ratios[0::2]), 4),
                                              "lines first": round(statistics.median(ratios[1::2]), 4)},
        "cold_s": cold, "library_bytes": {name: p.stat().st_size for name, p in libraries.items()},
    }, indent=1))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
