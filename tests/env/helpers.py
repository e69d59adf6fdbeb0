"""Building blocks for environment tests: the example task and solutions with swappable kernels."""

from __future__ import annotations

import shutil
from contextlib import contextmanager
from pathlib import Path

from cuda_agent.env import EvalConfig
from cuda_agent.tasks import Solution, Task, load_solution, load_task

EXAMPLES = Path(__file__).resolve().parents[2] / "src" / "cuda_agent" / "examples" / "bias_relu"


def example_task() -> Task:
    return load_task(EXAMPLES / "model.py")


def cpu_workspace(kernel_cpp: str | None = None, model_new: str | None = None) -> Solution:
    """The example's CPU workspace solution, optionally with another kernel body or model_new.py.

    The binding file stays the same, so its (slow) build is shared by every test through the cache.
    """
    return example_solution("cpu", kernel_cpp, model_new)


def example_solution(backend: str, kernel_source: str | None = None, model_new: str | None = None) -> Solution:
    """The example's workspace for `backend` ("cpu" or "cuda") with its kernel file and/or
    model_new.py replaced; the binding is kept."""
    files = dict(load_solution(EXAMPLES / f"solution_{backend}").files)
    if kernel_source is not None:
        files["kernels/bias_relu.cpp" if backend == "cpu" else "kernels/bias_relu.cu"] = kernel_source
    if model_new is not None:
        files["model_new.py"] = model_new
    return Solution(files)


def kernel(body: str) -> str:
    """A plain C++ kernel with the example's launcher signature; `body` sees x, bias, out, rows, cols."""
    return ("#include <csignal>\n#include <cstdint>\n#include <cstdlib>\n#include <cstring>\n"
            "extern \"C\" void bias_relu_launcher(const float* x, const float* bias, float* out, "
            "int64_t rows, int64_t cols) {\n" + body + "\n}\n")


HONEST_BODY = """
for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
        float v = x[r * cols + c] + bias[c];
        out[r * cols + c] = v > 0.f ? v : 0.f;
    }
"""

WRONG_BODY = """
for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] = x[r * cols + c] + bias[c];
"""   # no ReLU: wrong wherever x + bias < 0


def cpu_config(cache_dir: Path, **overrides) -> EvalConfig:
    settings = dict(backend="cpu", cache_dir=cache_dir, compile_baseline=False, warmup=2, iters=5,
                    num_correct_trials=3, timeout_verify=20.0, timeout_profile=60.0)
    settings.update(overrides)
    return EvalConfig(**settings)


def wait_for_kept_judges(timeout: float = 30.0) -> None:
    """Until every idle persistent judge is ready (its last candidate exited, its job let go): an
    evaluation that starts sooner waits at most `judges.TAKE_WAIT_S` and then starts a judge of its own
    (infra/judges.take), so a test that follows one judge over several evaluations waits here first."""
    import time

    from cuda_agent.env.infra import judges

    deadline = time.monotonic() + timeout
    while not judges.all_ready():
        if time.monotonic() > deadline:
            raise AssertionError(f"an idle judge is not ready after {timeout:g} s")
        time.sleep(0.02)


@contextmanager
def driver_script_compiler(folder: Path, monkeypatch):
    """The harness's compiler made a script like the GPU host's /opt/gcc/bin/g++: the real driver run with a `-B`
    folder of its own first, holding an assembler, so a `-B` given to it comes too late (the assembler guard is
    then given as gcc's `-wrapper`). Yields the script."""
    from cuda_agent.env.builds import compiler

    own = folder / "gcc" / "bin"
    own.mkdir(parents=True)
    (own / "as").symlink_to(shutil.which("as"))
    script = own / "g++"
    script.write_text(f'#!/bin/sh\nexec {shutil.which("g++")} -B{own}/ "$@"\n')
    script.chmod(0o755)
    monkeypatch.setenv("CXX", str(script))
    compiler.toolchain.cache_clear()
    try:
        yield script
    finally:
        compiler.toolchain.cache_clear()
