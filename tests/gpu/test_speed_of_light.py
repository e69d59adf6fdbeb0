"""The speed of light on the GPUs we run on: the device is in the peak table, and an evaluation of the
example's CUDA kernel (bias + ReLU, memory-bound) reports its fraction of the datasheet bandwidth. Run with `-m gpu`."""

from __future__ import annotations

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.measure.peaks import gpu_peak
from tests.env.helpers import example_solution, example_task
from tests.gpu.helpers import gpu_config

pytestmark = pytest.mark.gpu


def test_this_gpu_is_in_the_peak_table():
    import torch

    name = torch.cuda.get_device_name(0)
    peak = gpu_peak(name)
    assert peak is not None, f"{name!r} has no datasheet peak (env/measure/peaks.py GPU_PEAKS)"
    assert ("H100" in name and "H100" in peak.name) or ("H200" in name and "H200" in peak.name)


def test_the_example_kernel_reports_its_fraction_of_the_bandwidth(cache_dir):
    result = evaluate(example_task(), example_solution("cuda"), gpu_config(cache_dir, compile_baseline=False))
    assert result.correct, result.error
    sol = result.speed_of_light
    assert sol.peak == gpu_peak(result.device).name and sol.bound == "memory" and sol.flops is None
    assert sol.bytes == 4 * (512 * 1024 * 2 + 1024) and sol.kernel_ms == result.kernel_ms
    # a real kernel moves its bytes no faster than the datasheet allows (small tasks: far below it)
    assert 0 < sol.fraction <= 1.0, (sol.fraction, sol.kernel_ms)
    assert sol.achieved_gbps == pytest.approx(sol.bytes / (result.kernel_ms / 1e3) / 1e9)
