"""The environment on a real GPU: honest kernels of several kinds, both solution forms, failures,
and one KernelBench task per level with eager and torch.compile timings. Run with `-m gpu`."""

from __future__ import annotations

import json
import os

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import load_solution, load_task
from tests.env.helpers import EXAMPLES, example_solution, example_task
from tests.gpu.helpers import SOLUTIONS, example_with_kernel, gpu_config, workspace

pytestmark = pytest.mark.gpu
REPORT = os.environ.get("CUDA_AGENT_GPU_REPORT")  # JSON lines of results, for the closing note


def _record(name: str, result) -> None:
    if REPORT:
        with open(REPORT, "a") as fh:
            fh.write(json.dumps({"test": name, **result.to_dict()}) + "\n")


def _assert_correct(result):
    assert result.error is None, f"{result.error.phase}: {result.error.message}"
    assert result.correct and result.kernel_ms > 0


def test_elementwise_workspace(cache_dir):
    result = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda"), gpu_config(cache_dir))
    _record("elementwise_workspace", result)
    _assert_correct(result)
    assert result.eager_ms and result.compile_ms and result.reward >= 1
    assert result.timer["kernel"] == "held" and result.timer["eager"] == "held"   # env/measure/hold.py


def test_a_forward_that_waits_for_the_device_is_timed_unheld(cache_dir):
    """`.item()` inside forward waits for a hold that opens only after forward returns: the hold lets go
    after its timeout, and the candidate's calls are timed unheld from then on (never faster)."""
    solution = load_solution(EXAMPLES / "solution_cuda")
    model_new = solution.entry_code.replace("        return cuda_extension.bias_relu(x, self.bias)",
                                            "        out = cuda_extension.bias_relu(x, self.bias)\n"
                                            "        out[0, 0].item()\n        return out")
    assert model_new != solution.entry_code
    result = evaluate(example_task(), example_solution("cuda", model_new=model_new),
                      gpu_config(cache_dir, compile_baseline=False))
    _record("synchronising_forward", result)
    _assert_correct(result)
    assert result.timer == {"kernel": "unheld", "eager": "held"}


def test_elementwise_single_file_load_inline(cache_dir):
    result = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda_inline.py"),
                      gpu_config(cache_dir, compile_baseline=False))
    _record("elementwise_load_inline", result)
    _assert_correct(result)


def test_reduction_with_warp_shuffles(cache_dir):
    result = evaluate(load_task(SOLUTIONS / "row_sum" / "task.py"), workspace("row_sum"),
                      gpu_config(cache_dir, compile_baseline=False))
    _record("row_sum_reduction", result)
    _assert_correct(result)


def test_illegal_memory_access_is_contained(cache_dir):
    bad = evaluate(example_task(), example_with_kernel("illegal_access.cu"), gpu_config(cache_dir, baselines=False))
    _record("illegal_memory_access", bad)
    assert not bad.correct and bad.reward == -1 and bad.error.phase == "verify"
    assert "illegal memory access" in (bad.error.message + bad.log).lower()
    # the GPU is still usable: an honest kernel right after is scored correctly
    good = evaluate(example_task(), load_solution(EXAMPLES / "solution_cuda"), gpu_config(cache_dir))
    _assert_correct(good)


@pytest.mark.parametrize("spec,model_new", [
    ("level1/1", "level1_matmul.py"),
    ("level2/76", "level2_gemm_add_relu.py"),
    ("level3/1", "level3_mlp.py"),
])
def test_kernelbench_task_per_level_with_cublas(cache_dir, kernelbench, spec, model_new):
    task = load_task(spec, kernelbench)
    result = evaluate(task, workspace("gemm", model_new), gpu_config(cache_dir, timeout_reference=900.0))
    _record(f"kernelbench_{spec}", result)
    _assert_correct(result)
    assert result.eager_ms > 0 and result.compile_ms > 0
    assert result.weights == ("state_dict" if spec != "level1/1" else "none")
