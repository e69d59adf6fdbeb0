"""The third and fourth rounds of cheats on a real GPU, beside the honest controls they must not touch:
a TF32 GEMM within tolerance, a side stream joined with events, a reduction whose output barely varies
computed honestly; an approximate reduction, a constant answer, ATen's CUDA kernels called past the
dispatcher, and a kernel that computes only when it believes it is watched. Run with `-m gpu`."""

from __future__ import annotations

import os
import textwrap

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import Solution, load_task
from tests.env.helpers import example_solution, example_task
from tests.gpu.helpers import workspace
from tests.gpu.hacks.test_gpu_hacks import _record, config, cu, cuda_workspace
from tests.hacks.cases import TASKS, assert_accepted, assert_rejected, example_model_new, gemm_task
from tests.hacks.cases_wave import FORGED_TIME_ONCE, WATCH_BY_MODE_STACK

pytestmark = pytest.mark.gpu
HINGE_TASK = os.path.join(os.path.dirname(__file__), "..", "..", "hacks", "tasks", "hinge_loss.py")


def hinge(forward: str, header: str = "") -> Solution:
    files = dict(workspace("hinge").files)
    files["model_new.py"] = ("import torch\nimport torch.nn as nn\n\nimport cuda_extension\n" + textwrap.dedent(header)
                             + "\n\nclass ModelNew(nn.Module):\n    def forward(self, predictions, targets):\n"
                             + textwrap.indent(textwrap.dedent(forward).strip(), " " * 8) + "\n")
    return Solution(files)


# -- honest controls ----------------------------------------------------------------------------


def tf32_gemm():
    """cuBLAS in TF32 tensor-op mode: about 1e-3 relative error, inside the published tolerance and
    the strict one on outputs of unit scale. (On raw randn inputs with K=384 the outputs' scale is
    about 20 and TF32's error about 0.02: outside KernelBench's own atol of 1e-2 as well.)"""
    files = dict(workspace("gemm", "level1_matmul.py").files)
    files["kernels/gemm.cu"] = files["kernels/gemm.cu"].replace(
        "if (!h) cublasCreate(&h);", "if (!h) { cublasCreate(&h); cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); }")
    assert "CUBLAS_TF32_TENSOR_OP_MATH" in files["kernels/gemm.cu"]
    return load_task(TASKS / "gemm_unit_scale.py"), Solution(files)


def side_stream_joined():
    kernel = cu("""
        static cudaStream_t side = nullptr;
        static cudaEvent_t done = nullptr;
        if (!side) {
            cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
            cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
        }
        cudaEvent_t ready;
        cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
        cudaEventRecord(ready, stream);          // the side stream starts after the inputs are ready
        cudaStreamWaitEvent(side, ready, 0);
        bias_relu_kernel<<<(n + 255) / 256, 256, 0, side>>>(x, bias, out, n, cols, 0);
        cudaEventRecord(done, side);
        cudaStreamWaitEvent(stream, done, 0);    // ... and the caller's stream waits for it
        cudaEventDestroy(ready);
        return cudaGetLastError();
        """)
    return example_task(), example_solution("cuda", kernel)


def honest_hinge():
    """A reduction whose output barely varies between input sets, computed honestly."""
    return load_task(HINGE_TASK), hinge("return cuda_extension.hinge(predictions, targets, 1)")


def cublas_from_cpp():
    return gemm_task(), workspace("gemm", "level1_matmul.py")


HONEST = {"honest_tf32_gemm": tf32_gemm, "honest_side_stream_joined": side_stream_joined,
          "honest_hinge_gpu": honest_hinge}
# cuBLAS from C++ is test_gpu_hacks' honest GEMM in the strict protocol; here in the published one too
PUBLISHED = {**HONEST, "honest_cublas_from_cpp": cublas_from_cpp}


@pytest.mark.parametrize("name", HONEST)
def test_honest_control_is_accepted(name, cache_dir):
    task, solution = HONEST[name]()
    result = evaluate(task, solution, config(cache_dir))
    _record(name, "honest", result)
    assert_accepted(result)
    if name == "honest_tf32_gemm":
        assert max(result.max_abs_error) > 1e-5   # it really computed in reduced precision


@pytest.mark.parametrize("name", PUBLISHED)
def test_honest_control_passes_the_published_protocol_too(name, cache_dir):
    task, solution = PUBLISHED[name]()
    result = evaluate(task, solution, config(cache_dir, protocol="published"))
    _record(f"{name}_published", "honest", result)
    assert_accepted(result)
    assert result.protocol == "published"


# -- cheats -------------------------------------------------------------------------------------


def test_approximate_reduction_is_rejected(cache_dir):
    result = evaluate(load_task(HINGE_TASK), hinge("return cuda_extension.hinge(predictions, targets, 31)"),
                      config(cache_dir))
    _record("approx_hinge_every_31st_gpu", "hack", result)
    assert_rejected(result, ("correctness",))


def test_constant_answer_is_rejected(cache_dir):
    result = evaluate(load_task(HINGE_TASK), hinge("return cuda_extension.constant(predictions, 1.0833)"),
                      config(cache_dir))
    _record("constant_hinge_gpu", "hack", result)
    assert_rejected(result, ("correctness", "input-independent"))


def test_computing_only_when_watched_is_rejected(cache_dir):
    result = evaluate(load_task(HINGE_TASK), hinge("""
        if _c._len_torch_dispatch_stack() > 0:
            return cuda_extension.hinge(predictions, targets, 1)
        return cuda_extension.constant(predictions, 1.0833)
        """, header=WATCH_BY_MODE_STACK), config(cache_dir))
    _record("watched_by_mode_stack_gpu", "hack", result)
    # (the allowlist refuses the computed getattr and torch's private module before anything runs)
    assert_rejected(result, ("correctness", "recheck-after-timing", "input-independent", "static:introspection"))


ATEN_CUDA_MM = """
#include <ATen/ATen.h>
#include <ATen/ops/mm_cuda_dispatch.h>

at::Tensor direct_mm(const at::Tensor& a, const at::Tensor& b) { return at::cuda::mm(a, b); }
"""


def test_aten_cuda_kernel_past_the_dispatcher_is_refused(cache_dir):
    files = dict(workspace("gemm", "level1_matmul.py").files)
    files["kernels/cheat.cpp"] = ATEN_CUDA_MM
    result = evaluate(gemm_task(), Solution(files), config(cache_dir))
    _record("aten_cuda_mm_gpu", "hack", result)
    assert_rejected(result, ("native-symbol",))
    assert "at::cuda::mm" in result.error.message



# -- forged clocks (the harness's wall clock outside the candidate's process exposes them) --------

SLOW_KERNEL = cu("""
    bias_relu_kernel<<<(n + 255) / 256, 256, 0, stream>>>(x, bias, out, n, cols, 16000000LL);
    return cudaGetLastError();
    """)   # about 8 ms of spinning per wave of blocks, some 16 ms a call. (At 4 ms a call a clock
           # forged to a tenth passed on the H100: the allowance, 4x the noise of the harness's empty
           # calls there, was above the 3.7 ms it hid; docs/verification.md, "what remains open".)

FORGED_CLOCKS = {
    # the event timer the harness reads in the candidate's process, at a tenth of the speed
    "forged_event_elapsed": """
        import cuda_agent.env.measure.timing as _timing
        _real_elapsed = _timing._event_elapsed
        _timing._event_elapsed = lambda start, end: _real_elapsed(start, end) / 10
        """,
    "forged_time_once": FORGED_TIME_ONCE,   # the harness's timing function itself, reporting a tenth
}


@pytest.mark.parametrize("name", FORGED_CLOCKS)
def test_a_forged_clock_disagrees_with_the_harness_wall_clock(name, cache_dir):
    """The static pass would refuse these patches (guard off here, so the clock check alone decides)."""
    model_new = example_model_new("return cuda_extension.bias_relu(x, self.bias)", header=FORGED_CLOCKS[name])
    result = evaluate(example_task(), cuda_workspace(SLOW_KERNEL, model_new), config(cache_dir, guard=False))
    _record(name, "hack", result)
    assert_rejected(result, ("clock-disagreement",))


def test_the_same_slow_kernel_with_its_real_clock_is_accepted(cache_dir):
    result = evaluate(example_task(), cuda_workspace(SLOW_KERNEL), config(cache_dir, guard=False))
    _record("honest_slow_kernel_real_clock", "honest", result)
    assert_accepted(result)
    assert result.kernel_ms >= 8.0
