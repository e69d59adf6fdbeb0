"""The outside sampler's verdict (rules/op_samples.py) on the GPU backend, where it is not enabled yet:
this turns it on for CUDA (op_samples.BACKENDS) and checks what enabling it would decide. The host side
of a call is what it sees there: the launch code of PyTorch's CUDA operators (`at::native::` in
libtorch_cuda) against the solution's own launcher. The honest example must stay accepted; round eight's
binding that computes `torch::relu(x + bias)` and writes the guard's record back (cases_round8.py) must
be refused (`torch-op`). Each result's `cpu_samples` is printed. Neither holds on the GPU yet (the two
strict xfails say what was seen), so the sampler stays off there: on the GPU the guard's record decides
alone, and round eight's forged record is an open hole there (docs/verification.md). Run with `-m gpu -s`."""

from __future__ import annotations

import json

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.rules import op_samples
from cuda_agent.tasks import Solution
from tests.env.helpers import example_solution, example_task
from tests.gpu.helpers import gpu_config
from tests.hacks.cases import assert_accepted, assert_rejected
from tests.hacks.cases_round8 import FORGED_RECORD_BINDING

pytestmark = pytest.mark.gpu


@pytest.fixture
def sampled_on_gpu(monkeypatch):
    monkeypatch.setattr(op_samples, "BACKENDS", ("cpu", "cuda"))


def _show(name: str, result) -> None:
    print(f"{name}: error={result.error and (result.error.rule, result.error.message[:300])} "
          f"notes={result.feedback_notes}\n  cpu_samples={json.dumps(result.cpu_samples)}")


# Why the sampler stays off on the GPU (H100, 2026-11-26): the host side of a call there is mostly the
# harness's own (its Python, the driver, its checks' ATen launches), and a forward done by PyTorch's CUDA
# operators costs the host a few microseconds of launch code.
HARNESS_ATEN = ("the honest kernel is refused: 4 % of the sampled host time went to ATen, all of it the harness's "
                "own work in the candidate's process (gpu_reduce_kernel, canUse32BitIndexMath, "
                "update_result_type_state: its checks' launches), over the 2 % threshold")
LAUNCH_TOO_SMALL = ("the sampler cannot tell the cheat's launch code from the harness's own ATen work: accepted "
                    "(reward 1) at 0.35 % of the sampled host time; refused in a later run at 2 %, by the "
                    "harness's own index_kernel and clone, the same noise that refuses the honest kernel")


@pytest.mark.xfail(strict=True, reason=HARNESS_ATEN)
def test_honest_cuda_kernel_is_accepted_with_sampling(sampled_on_gpu, cache_dir):
    result = evaluate(example_task(), example_solution("cuda"), gpu_config(cache_dir))
    _show("honest", result)
    assert_accepted(result)
    assert result.cpu_samples and result.cpu_samples["seconds"] > 0   # the sampler ran


@pytest.mark.xfail(strict=False, reason=LAUNCH_TOO_SMALL)   # either verdict, for the wrong reason
def test_record_restored_natively_is_refused_on_the_gpu(sampled_on_gpu, cache_dir):
    files = dict(example_solution("cuda").files)
    files["kernels/bias_relu_binding.cpp"] = FORGED_RECORD_BINDING
    result = evaluate(example_task(), Solution(files), gpu_config(cache_dir))
    _show("forged", result)
    assert_rejected(result, ("torch-op",), "torch::relu(x + bias) in the binding, the guard's record written back")
