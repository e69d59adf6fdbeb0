"""Feedback on failure on a real GPU (the lead runs `-m gpu`): wrong outputs timed unscored, a crash of
the host launcher named with its input set and frames, a kernel launched from a detached thread, and
the task's sizes hard-coded (the second size)."""

from __future__ import annotations

import pytest

from cuda_agent.env import evaluate
from tests.env.helpers import EXAMPLES, example_solution, example_task
from tests.gpu.helpers import gpu_config

pytestmark = pytest.mark.gpu
KERNEL = (EXAMPLES / "solution_cuda" / "kernels" / "bias_relu.cu").read_text()
MODEL_NEW = (EXAMPLES / "solution_cuda" / "model_new.py").read_text()
LAUNCH = "    int64_t n4 = n / 4;\n"


def test_unscored_times_a_wrong_kernel_on_the_gpu(cache_dir):
    no_relu = KERNEL.replace("fmaxf(v.x + bias[c], 0.f)", "v.x + bias[c]")
    result = evaluate(example_task(), example_solution("cuda", no_relu), gpu_config(cache_dir, unscored=True))
    assert result.error.rule == "correctness" and result.reward == -1 and not result.correct
    assert result.unscored["kernel_ms"] > 0 and result.unscored["speedup_vs_eager"] > 0
    assert result.kernel_ms is None and result.timings == {}


def test_a_crash_in_the_host_launcher_names_its_input_set_and_frames(cache_dir):
    crash = KERNEL.replace(LAUNCH, LAUNCH + '    *(volatile char*)const_cast<char*>("read-only") = 0;\n')
    result = evaluate(example_task(), example_solution("cuda", crash), gpu_config(cache_dir, baselines=False),
                      stop_after="verify")
    assert result.error.rule == "crash" and "on input set 1 (seed " in result.error.message
    assert "bias_relu_launcher" in result.error.message and "model_new.py line" in result.error.message


def test_a_kernel_launched_from_a_detached_thread_is_named_as_work_after_forward(cache_dir):
    late = "#include <chrono>\n#include <thread>\n" + KERNEL.replace(
        "    bias_relu_kernel<<<blocks, threads, 0, stream>>>(reinterpret_cast<const float4*>(x), bias,\n"
        "                                                    reinterpret_cast<float4*>(out), n4, cols);\n",
        "    std::thread([=] {\n"
        "        std::this_thread::sleep_for(std::chrono::milliseconds(50));\n"
        "        bias_relu_kernel<<<blocks, threads>>>(reinterpret_cast<const float4*>(x), bias,\n"
        "                                              reinterpret_cast<float4*>(out), n4, cols);\n"
        "    }).detach();\n")
    assert late != "#include <chrono>\n#include <thread>\n" + KERNEL
    result = evaluate(example_task(), example_solution("cuda", late), gpu_config(cache_dir, baselines=False),
                      stop_after="verify")
    assert result.error.rule == "background-thread", result.error
    assert "work still running after forward returned (a detached thread?" in result.error.message


def test_the_tasks_sizes_hard_coded_fail_at_the_second_size(cache_dir):
    fixed = MODEL_NEW.replace("bias_relu(x, self.bias)", "bias_relu(x.view(512, 1024), self.bias)")
    assert fixed != MODEL_NEW
    result = evaluate(example_task(), example_solution("cuda", model_new=fixed), gpu_config(cache_dir, other_scale=True),
                      stop_after="verify")
    assert result.error.rule == "fixed-shape" and "batch 512 -> 256" in result.error.message
