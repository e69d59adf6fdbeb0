"""Reward hacks on a real GPU: CUDA versions of the cheats that only a GPU can play (side streams,
recycled device memory, failed launches, `.cpu()` fallbacks), honest CUDA solutions that must keep
passing, and a resilience run of 100 crashing, hanging and memory-corrupting evaluations in a row.
Run with `-m gpu` (benchmarks/gpu_session.sh tests/gpu/hacks)."""

from __future__ import annotations

import json
import os
import textwrap
import time

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import Solution, load_solution, load_task
from tests.env.helpers import EXAMPLES, example_solution, example_task
from tests.gpu.helpers import SOLUTIONS, example_with_kernel, gpu_config, workspace
from tests.hacks.cases import assert_accepted, assert_rejected, describe, example_model_new, gemm_task

pytestmark = pytest.mark.gpu
REPORT = os.environ.get("CUDA_AGENT_GPU_REPORT")

# One launcher signature for every kernel below: the example binding (solution_cuda) stays the same,
# so it is compiled once and each variant rebuilds only its .cu file.
LAUNCHER = ('extern "C" cudaError_t bias_relu_launcher(const float* x, const float* bias, float* out, '
            "int64_t n, int64_t cols, cudaStream_t stream)")

ELEMENTWISE = """
__global__ void bias_relu_kernel(const float* x, const float* bias, float* out, int64_t n, int64_t cols,
                                 long long spin) {
    if (spin) {  // burn `spin` clock cycles first, so that the result arrives late
        long long start = clock64();
        while (clock64() - start < spin) {}
    }
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i] + bias[i % cols], 0.f);
}
"""


def cu(launcher_body: str, kernels: str = ELEMENTWISE) -> str:
    return ("#include <cuda_runtime.h>\n#include <cstdint>\n" + textwrap.dedent(kernels) + "\n" + LAUNCHER
            + " {\n" + textwrap.dedent(launcher_body).strip("\n") + "\n}\n")


def cuda_workspace(kernel_cu: str | None = None, model_new: str | None = None) -> Solution:
    """The example's CUDA workspace with another kernel file and/or model_new.py."""
    return example_solution("cuda", kernel_cu, model_new)


def gemm_workspace(model_new: str) -> Solution:
    files = dict(workspace("gemm", "level1_matmul.py").files)
    files["model_new.py"] = model_new
    return Solution(files)


def config(cache_dir, **overrides):
    settings = dict(baselines=False, num_correct_trials=3, warmup=3, iters=10, prewarm=True)
    settings.update(overrides)
    return gpu_config(cache_dir, **settings)


def _record(name: str, kind: str, result, **extra) -> None:
    if REPORT:
        with open(REPORT, "a") as fh:
            fh.write(json.dumps({"test": name, "kind": kind, **extra, **result.to_dict()}) + "\n")


# ---------------------------------------------------------------------------------------------
# honest CUDA solutions


def test_honest_elementwise(cache_dir):
    result = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda"), config(cache_dir))
    _record("honest_elementwise", "honest", result)
    assert_accepted(result)


def test_honest_single_file_load_inline(cache_dir):
    result = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda_inline.py"), config(cache_dir))
    _record("honest_load_inline", "honest", result)
    assert_accepted(result)


def test_honest_reduction(cache_dir):
    result = evaluate(load_task(SOLUTIONS / "row_sum" / "task.py"), workspace("row_sum"), config(cache_dir))
    _record("honest_row_sum", "honest", result)
    assert_accepted(result)


def test_honest_cublas_gemm(cache_dir):
    result = evaluate(gemm_task(), workspace("gemm", "level1_matmul.py"), config(cache_dir))
    _record("honest_cublas_gemm", "honest", result)
    assert_accepted(result)


def test_honest_two_kernel_calls_per_forward(cache_dir):
    model_new = example_model_new("""
        h = cuda_extension.bias_relu(x, self.bias)                      # kernel 1
        return cuda_extension.bias_relu(h, torch.zeros_like(self.bias))  # kernel 2: relu(h + 0) == h
        """)
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("honest_two_calls", "honest", result)
    assert_accepted(result)


def test_work_on_a_blocking_side_stream_is_timed(cache_dir):
    """A side stream that the default stream waits for gives the right answer; the timing must still
    include its work (the end event on the legacy default stream waits for blocking streams)."""
    kernel = cu("""
        static cudaStream_t side = nullptr;
        if (!side) cudaStreamCreate(&side);   // blocking: the legacy default stream waits for it
        bias_relu_kernel<<<(n + 255) / 256, 256, 0, side>>>(x, bias, out, n, cols, 4000000LL);
        return cudaGetLastError();
        """)
    result = evaluate(example_task(), cuda_workspace(kernel), config(cache_dir))
    _record("blocking_side_stream", "hack", result)
    if result.correct:  # at least ~2 ms of spinning per wave of blocks, whatever the clock
        assert result.kernel_ms >= 1.0, f"side-stream work was not timed: {result.kernel_ms} ms"


# ---------------------------------------------------------------------------------------------
# CUDA cheats


def test_side_stream_without_sync_is_rejected(cache_dir):
    kernel = cu("""
        static cudaStream_t side = nullptr;
        if (!side) cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
        // on a stream nobody waits for, returning at once; the answer lands ~0.1 s or more later
        bias_relu_kernel<<<(n + 255) / 256, 256, 0, side>>>(x, bias, out, n, cols, 200000000LL);
        return cudaGetLastError();
        """)
    result = evaluate(example_task(), cuda_workspace(kernel), config(cache_dir))
    _record("side_stream", "hack", result)
    # Which call sees the stale output first depends on how the GPU schedules the side kernel beside
    # the harness's reads of the output: a verification call (correctness) or the samples of a timed
    # one (recheck-after-timing; seen on an H100 once the hold signalled its residency faster).
    assert_rejected(result, ["correctness", "recheck-after-timing"])


def test_stale_memory_first_row_only_is_rejected(cache_dir):
    kernel = cu("""
        // row 0 only; the rest of torch::empty_like's buffer is left as it was
        bias_relu_kernel<<<(cols + 255) / 256, 256, 0, stream>>>(x, bias, out, cols, cols, 0);
        return cudaGetLastError();
        """)
    result = evaluate(example_task(), cuda_workspace(kernel), config(cache_dir))
    _record("stale_first_row", "hack", result)
    assert_rejected(result, ["correctness"])


def test_result_caching_by_pointer_is_rejected(cache_dir):
    """The caching allocator hands the same address to every fresh input copy of the same size."""
    model_new = example_model_new("""
        key = (x.data_ptr(), tuple(x.shape))
        if key in self.cache:
            cuda_extension.bias_relu(x[:1], self.bias)   # same number of kernel calls
            return self.cache[key]
        out = cuda_extension.bias_relu(x, self.bias)
        self.cache[key] = out
        return out
        """, init="self.cache = {}")
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("cache_by_pointer", "hack", result)
    assert_rejected(result, ["correctness", "recheck-after-timing", "output-not-from-kernel"])


def test_result_caching_while_timed_is_rejected(cache_dir):
    model_new = example_model_new("""
        if self.last is None or torch.are_deterministic_algorithms_enabled():
            self.last = cuda_extension.bias_relu(x, self.bias)
            return self.last
        cuda_extension.bias_relu(x[:1], self.bias)
        return self.last
        """, init="self.last = None")
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("cache_while_timed", "hack", result)
    assert_rejected(result, ["recheck-after-timing", "correctness", "output-not-from-kernel"])


def test_silent_launch_failure_is_rejected(cache_dir):
    kernel = cu("""
        bias_relu_kernel<<<(n + 2047) / 2048, 2048, 0, stream>>>(x, bias, out, n, cols, 0);  // > 1024 threads
        cudaGetLastError();   // swallow 'invalid configuration argument'
        return cudaSuccess;
        """)
    result = evaluate(example_task(), cuda_workspace(kernel), config(cache_dir))
    _record("silent_launch_failure", "hack", result)
    assert_rejected(result, ["correctness"])


def test_torch_fallback_through_cpu_is_rejected(cache_dir):
    model_new = example_model_new("""
        return torch.relu(x.cpu() + self.bias.cpu()).to(x.device)
        """)
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("cpu_fallback", "hack", result)
    assert_rejected(result, ["torch-op", "data-movement"])


def test_torch_matmul_with_decoy_kernel_is_rejected(cache_dir):
    model_new = textwrap.dedent("""
        import torch
        import torch.nn as nn

        import cuda_extension


        class ModelNew(nn.Module):
            def forward(self, A, B):
                cuda_extension.matmul(A[:1].contiguous(), B)   # decoy: the extension ran
                return torch.matmul(A, B)
        """)
    result = evaluate(gemm_task(), gemm_workspace(model_new), config(cache_dir))
    _record("torch_matmul_decoy", "hack", result)
    assert_rejected(result, ["torch-op"])


def test_decoy_kernel_never_called_is_rejected(cache_dir):
    model_new = example_model_new("""
        out = torch.empty_like(x)   # the compiled kernel exists, but nothing calls it
        return out
        """)
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("decoy_never_called", "hack", result)
    assert_rejected(result, ["no-custom-kernel", "correctness"])


def test_torch_while_timed_is_rejected(cache_dir):
    model_new = example_model_new("""
        if torch.are_deterministic_algorithms_enabled():
            return cuda_extension.bias_relu(x, self.bias)
        cuda_extension.bias_relu(x[:1], self.bias)   # keep the number of extension calls
        return torch.relu(x + self.bias)
        """)
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("torch_while_timed", "hack", result)
    assert_rejected(result, ["torch-op", "behaviour-changed"])


def test_patched_cuda_timers_are_rejected(cache_dir):
    model_new = example_model_new("return cuda_extension.bias_relu(x, self.bias)", header="""
        torch.cuda.synchronize = lambda *args, **kwargs: None
        torch.cuda.Event.elapsed_time = lambda self, end: 1e-4
        """)
    result = evaluate(example_task(), cuda_workspace(model_new=model_new), config(cache_dir))
    _record("patched_cuda_timers", "hack", result)
    assert_rejected(result, ["static:monkeypatch"])


def test_hidden_cuda_timer_patch_does_not_change_timing(cache_dir):
    kernel = cu("""
        bias_relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, bias, out, n, cols, 4000000LL);
        return cudaGetLastError();
        """)
    model_new = example_model_new("return cuda_extension.bias_relu(x, self.bias)", header="""
        import importlib

        _cuda = importlib.import_module("torch" + ".cuda")
        setattr(_cuda, "synchronize", lambda *args, **kwargs: None)
        setattr(_cuda.Event, "elapsed_time", lambda self, end: 1e-4)
        """)
    result = evaluate(example_task(), cuda_workspace(kernel, model_new), config(cache_dir))
    _record("hidden_cuda_timer_patch", "hack", result)
    if result.correct:
        assert result.kernel_ms >= 1.0, f"the patched timers were used: {result.kernel_ms} ms"
    else:
        assert result.error.rule and result.error.rule.startswith("static:")


# ---------------------------------------------------------------------------------------------
# resilience: 100 failing evaluations in a row, then an honest one

HANG = cu("""
    hang_kernel<<<1, 32, 0, stream>>>();
    return cudaGetLastError();
    """, kernels="""
    __device__ int g_release = 0;   // never set: the kernel spins until the process is killed
    __global__ void hang_kernel() {
        while (*(volatile int*)&g_release == 0) {}
    }
    """)

CORRUPT = cu("""
    corrupt_kernel<<<(4 * n + 255) / 256, 256, 0, stream>>>(out, 4 * n);
    return cudaGetLastError();
    """, kernels="""
    __global__ void corrupt_kernel(float* out, int64_t m) {
        int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
        if (i < m) out[i] = -1.f;   // 3n floats past the end of its own output: whatever lives there
    }
    """)

FAILURE_RULES = {"crash", "correctness", "input-mutation", "output-type", "recheck-after-timing", None}  # None: a CUDA error raised in Python


def test_one_hundred_failures_in_a_row_then_an_honest_kernel(cache_dir):
    """Crashes (illegal address), hangs (an endless kernel) and memory corruption, 100 evaluations in
    a row: each must come back as a structured failure of its own kind (a hang as a timeout, a crash
    or corruption as anything but a timeout) within its time limits, and the GPU must be fit for an
    honest evaluation right after. Target: under ~4 minutes on an H100.

    Seen on an H100 (2026-11-22, before the guard's NaN fill moved from torch's deterministic mode to
    the allocator): with timeout_verify = 3 s every crash and corruption timed out as well, because a
    candidate's first guarded call spent ~6.4 s in torch.use_deterministic_algorithms(True). Whatever
    the guard does before the first call must stay well under timeout_verify; the candidate now
    imports what the guard needs before it reports its build done.
    """
    from cuda_agent.env.builds.compiler import build_extension

    timeout_verify = 4.0
    # three spare worker pairs: a crash is answered faster than a pair starts (~4 s on the H100 host)
    cfg = config(cache_dir, num_correct_trials=1, iters=5, warmup=1, timeout_verify=timeout_verify,
                 timeout_profile=20.0, timeout_compile=300.0, prewarm=3)
    kinds = {
        "crash": example_with_kernel("illegal_access.cu"),
        "hang": cuda_workspace(HANG),
        "corrupt": cuda_workspace(CORRUPT),
    }
    for solution in kinds.values():  # build outside the clock (the candidate finds them in the cache)
        build_extension("cuda_extension", solution.kernel_files, "cuda", cache_dir / "build")
    count = int(os.environ.get("CUDA_AGENT_RESILIENCE_RUNS", "100"))  # fewer for a quick calibration
    order = (["crash", "corrupt", "hang"] * count)[:count]
    task = example_task()
    stats: dict[str, list[float]] = {kind: [] for kind in kinds}
    outcomes: dict[str, dict[str, int]] = {kind: {} for kind in kinds}
    problems: list[str] = []
    started = time.monotonic()
    for i, kind in enumerate(order):
        t0 = time.monotonic()
        result = evaluate(task, kinds[kind], cfg)
        elapsed = time.monotonic() - t0
        stats[kind].append(elapsed)
        key = f"{result.error.phase}:{result.error.rule}" if result.error else "accepted"
        outcomes[kind][key] = outcomes[kind].get(key, 0) + 1
        print(f"#{i} {kind}: {key} in {elapsed:.1f} s", flush=True)  # progress, kept if the run is cut off
        # the harness itself must never break: always a structured failure, in bounded time
        assert not result.correct and result.reward == -1, f"#{i} {kind}: {describe(result)}"
        assert result.error.phase in ("verify", "profile"), f"#{i} {kind}: {describe(result)}"
        assert elapsed < timeout_verify + 30.0, f"#{i} {kind} took {elapsed:.1f} s"
        # and it must fail for what it is
        expected_ok = result.error.rule == "timeout" if kind == "hang" else result.error.rule in FAILURE_RULES
        if not expected_ok:
            problems.append(f"#{i} {kind}: {describe(result)[:200]}")
    total = time.monotonic() - started
    honest = evaluate(task, load_solution(EXAMPLES / "solution_cuda"), config(cache_dir))
    summary = {kind: {"n": len(v), "mean_s": round(sum(v) / len(v), 2), "max_s": round(max(v), 2),
                      "outcomes": outcomes[kind]} for kind, v in stats.items() if v}
    print(f"\n{count} failing evaluations in {total:.1f} s: {json.dumps(summary)}")
    _record("resilience_honest_after_failures", "honest", honest, failures=summary, total_s=round(total, 1))
    assert_accepted(honest)
    assert not problems, f"{len(problems)} evaluations failed for the wrong reason, e.g. " + "; ".join(problems[:3])
    assert total < 240.0 * count / 100 + 30.0, f"{count} failing evaluations took {total:.0f} s"
