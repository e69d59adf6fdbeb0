"""Build every solution here with the cuda backend's builder and run the checks that need no GPU.

    CUDA_AGENT_CUDA_ARCH=90a python benchmarks/kernelbench_solutions/build_all.py [--cache DIR] [KEY ...]

For each `levelN/ID/`: the static check of model_new.py and of the kernel sources (what an evaluation
rejects before running anything), the build of `kernels/` through `build_extension(..., backend="cuda")`,
and the check of what the built library links against. Scoring them needs a GPU: `cuda-agent bench
--solutions benchmarks/kernelbench_solutions` (benchmarks/bench_gpu.sh).

On a machine whose torch is a CPU build (no GPU), `--cpu-torch` lets the build go through: the CUDA
build of torch ships one generated header and two libraries the CPU build lacks; stand-ins for them
(an empty macro header, empty libraries to link against) go on the compilers' search paths. The
library built that way cannot be loaded, only checked. cuBLAS comes from the CUDA toolkit or the
`nvidia-cublas` wheel.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def cpu_torch_stand_ins(folder: Path) -> None:
    header = folder / "include" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text("#pragma once\n#define C10_CUDA_BUILD_SHARED_LIBS\n")
    (folder / "lib").mkdir(exist_ok=True)
    for name in ("c10_cuda", "torch_cuda"):
        subprocess.run(["cc", "-shared", "-x", "c", "/dev/null", "-o", str(folder / "lib" / f"lib{name}.so")], check=True)
    for var, sub in (("CPATH", "include"), ("LIBRARY_PATH", "lib")):
        os.environ[var] = os.pathsep.join(filter(None, [str(folder / sub), os.environ.get(var)]))


def check_one(folder: Path, cache: Path) -> tuple[bool, str]:
    from cuda_agent.env.builds.compiler import BuildError, build_extension
    from cuda_agent.env.rules.static_check import check_native_source, check_source
    from cuda_agent.env.rules.symbols import check_library
    from cuda_agent.tasks import load_solution

    solution = load_solution(folder)
    findings = check_source(solution.entry_code, "model_new.py")
    for path, text in solution.kernel_files.items():
        findings += check_native_source(text, path)
    rejected = [f.describe() for f in findings if f.reject]
    if rejected:
        return False, "static check: " + "; ".join(rejected)
    try:
        report = build_extension("cuda_extension", solution.kernel_files, "cuda", cache)
    except BuildError as exc:
        return False, exc.summary
    refused = check_library(report.path)
    if refused:
        return False, "links against " + ", ".join(f.describe() for f in refused)
    return True, "built, checks passed" + (f" ({len(findings)} warning(s))" if findings else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("keys", nargs="*", help="levelN/ID folders (default: all)")
    parser.add_argument("--cache", type=Path, default=None, help="build cache (default: a fresh temporary one)")
    parser.add_argument("--cpu-torch", action="store_true", help="build against a CPU build of torch (see above)")
    args = parser.parse_args()
    os.environ.setdefault("CUDA_AGENT_CUDA_ARCH", "90a")
    scratch = Path(tempfile.mkdtemp(prefix="kb-solutions-"))
    if args.cpu_torch:
        cpu_torch_stand_ins(scratch / "stand-ins")
    cache = args.cache or scratch / "cache"
    keys = args.keys or sorted(f"{p.parent.name}/{p.name}" for p in HERE.glob("level*/*") if p.is_dir())
    failures = 0
    for key in keys:
        start = time.monotonic()
        ok, message = check_one(HERE / key, cache)
        failures += not ok
        print(f"{key:12} {'ok  ' if ok else 'FAIL'} {time.monotonic() - start:6.1f} s  {message}", flush=True)
    print(f"{len(keys) - failures} of {len(keys)} built")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
