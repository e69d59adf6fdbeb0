"""The third and fourth rounds of cheats on a real GPU, beside the honest controls they must not touch:
a TF32 GEMM within tolerance, a side stream joined with events, a reduction whose output barely varies
computed honestly; an approximate reduction, a constant answer, ATen's CUDA kernels called past the
dispatcher, and a kernel that computes only when it believes it is watched. Run with `-m gpu`."""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import Solution, load_task
from tests.env.helpers import example_solution, example_task
from tests.gpu.helpers import workspace
from tests.gpu.hacks.test_gpu_hacks import config, cu
from tests.hacks.cases import TASKS, assert_accepted, assert_rejected, gemm_task
from tests.hacks.cases_wave import WATCH_BY_MODE_STACK

pytestmark = pytest.mark.gpu
REPORT = os.environ.get("CUDA_AGENT_GPU_REPORT")
HINGE_TASK = os.path.join(os.path.dirname(__file__), "..", "..", "hacks", "tasks", "hinge_loss.py")


def _record(name: str, kind: str, result) -> None:
    if REPORT:
        with open(REPORT, "a") as fh:
            fh.write(json.dumps({"test": name, "kind": kind, **result.to_dict()}) + "\n")


def hinge(forward: str, header: str = "") -> Solution:
    files = dict(workspace("hinge").files)
    files["model_new.py"] = ("import torch\nimport torch.nn as nn\n\nimport cuda_extension\n" + textwrap.dedent(header)
                             + "\n\nclass ModelNew(nn.Module):\n    def forward(self, predictions, targets):\n"
                             + textwrap.indent(textwrap.dedent(forward).strip(), " " * 8) + "\n")
    return Solution(files)


# -- honest controls ----------------------------------------------------------------------------


def test_honest_tf32_gemm_within_tolerance(cache_dir):
    """cuBLAS in TF32 tensor-op mode: about 1e-3 relative error, inside the published tolerance and
    the strict one on outputs of unit scale. (On raw randn inputs with K=384 the outputs' scale is
    about 20 and TF32's error about 0.02: outside KernelBench's own atol of 1e-2 as well.)"""
    files = dict(workspace("gemm", "level1_matmul.py").files)
    files["kernels/gemm.cu"] = files["kernels/gemm.cu"].replace(
        "if (!h) cublasCreate(&h);", "if (!h) { cublasCreate(&h); cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); }")
    assert "CUBLAS_TF32_TENSOR_OP_MATH" in files["kernels/gemm.cu"]
    result = evaluate(load_task(TASKS / "gemm_unit_scale.py"), Solution(files), config(cache_dir))
    _record("honest_tf32_gemm", "honest", result)
    assert_accepted(result)
    assert max(result.max_abs_error) > 1e-5   # it really computed in reduced precision


def test_honest_side_stream_joined_with_events(cache_dir):
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
    result = evaluate(example_task(), example_solution("cuda", kernel), config(cache_dir))
    _record("honest_side_stream_joined", "honest", result)
    assert_accepted(result)


def test_honest_reduction_whose_output_barely_varies(cache_dir):
    result = evaluate(load_task(HINGE_TASK), hinge("return cuda_extension.hinge(predictions, targets, 1)"),
                      config(cache_dir))
    _record("honest_hinge_gpu", "honest", result)
    assert_accepted(result)


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
    assert_rejected(result, ("correctness", "recheck-after-timing", "input-independent"))


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

