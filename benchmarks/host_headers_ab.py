"""The kernel edit's compile with and without the host compile's precompiled headers (builds/host_headers.py).

The example's kernel (`bias_relu.cu`, no torch header) through `compiler.build_extension` in a fresh build
cache, a new block size per build so each compiles; pairs alternate which goes first
(`CUDA_AGENT_HOST_PCH=0` for the plain compile). Only the compile is timed: the link is skipped (it would
need a CUDA build of torch, and the header changes nothing of it), so this runs on a machine without a GPU.

    python benchmarks/host_headers_ab.py [--pairs 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from cuda_agent.env.builds import compiler

KERNEL = Path(__file__).resolve().parents[1] / "src/cuda_agent/examples/bias_relu/solution_cuda/kernels/bias_relu.cu"


def _unlinked(run):
    def run_but_link(cmd, cwd, what, *args, **kwargs):
        if what == "linking":
            Path(cmd[cmd.index("-o") + 1]).write_bytes(b"")
            return None
        return run(cmd, cwd, what, *args, **kwargs)
    return run_but_link


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=6)
    args = parser.parse_args()
    compiler._run = _unlinked(compiler._run)
    source, cache = KERNEL.read_text(), Path(tempfile.mkdtemp(prefix="host-headers-ab-"))

    def compile_seconds(block: int, header: bool) -> float:
        os.environ["CUDA_AGENT_HOST_PCH"] = "1" if header else "0"
        edited = source.replace("int threads = 256;", f"int threads = {block};")
        return compiler.build_extension("k", {"kernels/bias_relu.cu": edited}, "cuda", cache).seconds["compile"]

    compile_seconds(64, True), compile_seconds(65, True)   # cold, then the header built beside the compile
    times = {True: [], False: []}
    for i in range(args.pairs):
        for header in ((True, False) if i % 2 else (False, True)):
            times[header].append(compile_seconds(100 + 2 * i + header, header))
    for header, label in ((True, "precompiled headers"), (False, "plain")):
        print(f"{label:20s} {' '.join(f'{t:.3f}' for t in times[header])}  median {statistics.median(times[header]):.3f} s")
    print(f"ratio {statistics.median(times[True]) / statistics.median(times[False]):.2f}")


if __name__ == "__main__":
    main()
