"""The outside sampler's verdict (rules/op_samples.py) on the GPU backend, where it is not enabled yet:
this turns it on for CUDA (op_samples.BACKENDS) and checks what enabling it would decide. The host side
of a call is what it sees there: the launch code of PyTorch's CUDA operators (`at::native::` in
libtorch_cuda) against the solution's own launcher. The honest example must stay accepted; round eight's
binding that computes `torch::relu(x + bias)` and writes the guard's record back (cases_round8.py) must
be refused (`torch-op`). Each result's `cpu_samples` is printed: the evidence for enabling it (or for
another threshold on the GPU). Run with `-m gpu -s`."""

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


def test_honest_cuda_kernel_is_accepted_with_sampling(sampled_on_gpu, cache_dir):
    result = evaluate(example_task(), example_solution("cuda"), gpu_config(cache_dir))
    _show("honest", result)
    assert_accepted(result)
    assert result.cpu_samples and result.cpu_samples["seconds"] > 0   # the sampler ran


def test_record_restored_natively_is_refused_on_the_gpu(sampled_on_gpu, cache_dir):
    files = dict(example_solution("cuda").files)
    files["kernels/bias_relu_binding.cpp"] = FORGED_RECORD_BINDING
    result = evaluate(example_task(), Solution(files), gpu_config(cache_dir))
    _show("forged", result)
    assert_rejected(result, ("torch-op",), "torch::relu(x + bias) in the binding, the guard's record written back")
