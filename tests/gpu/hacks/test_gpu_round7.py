"""The guard's verdict decided outside the candidate on a real GPU (the CUDA path: the candidate times and
samples its calls itself, the harness still reads the native guard's record and the thread list after
each). Round 6's verdict replaced from a C++ static initializer, and round 7's cheats against the record
(cases_round7.py), built beside the round-5 CUDA kernels; the honest control with the forging library
loaded. Run with `-m gpu`."""

from __future__ import annotations

import pytest

from cuda_agent.env import evaluate
from cuda_agent.tasks import Solution
from tests.gpu.hacks.test_gpu_hacks import _record, config
from tests.gpu.hacks.test_gpu_round5 import BIAS, model, round5
from tests.env.helpers import example_task
from tests.hacks import cases_round6, cases_round7
from tests.hacks.cases import assert_accepted, assert_rejected

pytestmark = pytest.mark.gpu

KERNEL = "return cuda_extension.bias_relu(x, self.bias)"
TORCH = "return torch.relu(x + self.bias)"
LINGER = "out = cuda_extension.bias_relu(x, self.bias)\ntorch.ops.r7.linger(out)\nreturn out"


def forged(library, mode: str, forward: str):
    def build():
        solution = round5(model("x", forward, BIAS, header=f"FORGE = {mode!r}", init_args="features"))
        forge = f"kernels/forge_{library.__name__.rsplit('_', 1)[-1]}.cpp"
        return example_task(), Solution({**solution.files, forge: library.FORGE_CPP})
    return build


HACKS = {
    "r6_gpu_guard_verdict_skipped": (forged(cases_round6, "skip_inspect", TORCH),
                                     ("torch-op", "no-custom-kernel", "output-not-from-kernel")),
    "r7_gpu_guard_driven_again": (forged(cases_round7, "drive_guard", TORCH), ("protocol-forgery", "torch-op")),
    "r7_gpu_output_check_skipped": (forged(cases_round7, "skip_outputs", KERNEL), ("protocol-forgery",)),
    "r7_gpu_memory_hidden": (forged(cases_round7, "hide_memory", TORCH), ("torch-op", "protocol-forgery")),
    "r7_gpu_native_thread_outlives_forward": (forged(cases_round7, "none", LINGER), ("background-thread",)),
}


def test_honest_kernel_beside_the_forging_library_is_accepted(cache_dir):
    task, solution = forged(cases_round7, "none", KERNEL)()
    result = evaluate(task, solution, config(cache_dir))
    _record("r7_gpu_honest_beside_forger", "honest", result)
    assert_accepted(result)


@pytest.mark.parametrize("name", HACKS)
def test_hack_is_rejected(name, cache_dir):
    build, rules = HACKS[name]
    task, solution = build()
    result = evaluate(task, solution, config(cache_dir))
    _record(name, "hack", result)
    assert_rejected(result, rules, name)
