"""The quick start's example on a GPU: the honest CUDA kernel beats eager and torch.compile (the
reference does O(T^2 C) work in a masked matrix multiply, the kernel a running sum). Run with `-m gpu`."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import load_solution, load_task
from tests.gpu.helpers import gpu_config

pytestmark = pytest.mark.gpu
EXAMPLE = Path(__file__).resolve().parents[2] / "src" / "cuda_agent" / "examples" / "running_mean"


def test_running_mean_example_earns_reward_3(cache_dir):
    result = evaluate(load_task(EXAMPLE / "model.py"), load_solution(EXAMPLE / "solution_cuda"), gpu_config(cache_dir))
    assert result.error is None, f"{result.error.phase}: {result.error.message}"
    assert result.correct and result.reward == 3, (result.kernel_ms, result.eager_ms, result.compile_ms)
