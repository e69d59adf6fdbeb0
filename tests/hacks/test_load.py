"""Rewards on a loaded CPU: an honest kernel that is slower than eager PyTorch must never earn the
faster-than-eager rewards (2 or 3) because other processes share the machine while it is timed (issue 31).
Three busy processes run beside each evaluation (on the 2-core CI machine: oversubscribed 2.5 times)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cuda_agent.env import evaluate
from tests.env.helpers import HONEST_BODY, cpu_workspace, example_task
from tests.hacks.cases import describe, example_kernel, gemm_task, hack_config
from tests.hacks.cases_round5 import gemm_model, round5_workspace

BUSY_PROCESSES = 3


def _naive_gemm():
    """i-j-k order, B read down its columns: tens of times slower than the BLAS behind torch.matmul."""
    return gemm_task(), round5_workspace(gemm_model("return cuda_extension.gemm_naive(a, b)"))


def _redundant_bias_relu():
    """The example's honest loop run twenty times over: about twice as slow as relu(x + bias) in PyTorch
    at its fastest (1.5 ms against 3 ms a call here, each on fresh inputs)."""
    body = "for (int rep = 0; rep < 20; ++rep) {\n" + HONEST_BODY + "}\n"
    return example_task(), cpu_workspace(example_kernel(body))


SLOW = {"naive_gemm": _naive_gemm, "redundant_bias_relu": _redundant_bias_relu}


@pytest.mark.parametrize("name", SLOW)
def test_a_slower_kernel_earns_no_speedup_reward_on_a_loaded_machine(name, cache_dir, record):
    task, solution = SLOW[name]()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(BUSY_PROCESSES)]
    try:
        result = evaluate(task, solution, hack_config(cache_dir, baselines=True, compile_baseline=False))
    finally:
        for process in busy:
            process.kill()
        for process in busy:
            process.wait()
    record(f"slower_than_eager_under_load_{name}", "honest", "honest", result,
           what=f"an honest kernel slower than eager ({name}), timed beside {BUSY_PROCESSES} busy processes")
    assert result.correct and result.error is None, describe(result)
    assert result.speedup_vs_eager is not None and result.speedup_vs_eager < 1, describe(result)
    assert result.reward <= 1, (f"reward {result.reward} for a kernel slower than eager: speedup "
                                f"{result.speedup_vs_eager:.3f}, kernel {result.kernel_ms:.3f} ms, "
                                f"eager {result.eager_ms:.3f} ms")
