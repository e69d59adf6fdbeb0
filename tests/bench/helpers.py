"""Building blocks for benchmark tests: a small KernelBench-like folder of CPU tasks, solution folders,
and a deterministic async evaluator that reads its verdict from the solution's text."""

from __future__ import annotations

import asyncio
import re
import shutil
from pathlib import Path

from cuda_agent.bench.memory import USABLE
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult
from cuda_agent.env.reward import milestone_reward
from tests.env.helpers import EXAMPLES
from tests.gates import StartGate

ELEMENTWISE = '''\
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.{op}(x)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return []
'''

# level1: 1 (bias+relu, the example), 2 (relu), 3 (sigmoid); level2: 1 (tanh), 2 (broken reference)
KB_TASKS = {
    "level1/1_BiasReLU.py": None,
    "level1/2_ReLU.py": ELEMENTWISE.format(op="relu"),
    "level1/3_Sigmoid.py": ELEMENTWISE.format(op="sigmoid"),
    "level2/1_Tanh.py": ELEMENTWISE.format(op="tanh"),
    "level2/2_Broken.py": ELEMENTWISE.format(op="tanh").replace("return [torch.randn(16, 32)]",
                                                                "raise RuntimeError('reference is broken')"),
}


def make_kernelbench(root: Path) -> Path:
    for rel, code in KB_TASKS.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(code if code is not None else (EXAMPLES / "model.py").read_text())
    return root


def fake_solution(kernel_ms: float | None = 1.0, *, wrong: bool = False, no_compile: bool = False,
                  big: bool = False) -> str:
    """A model_new.py whose markers tell `FakeEvaluator` the verdict and kernel time (`big`: runs out
    of GPU memory unless evaluated alone)."""
    marks = [f"# kernel_ms={kernel_ms}"] if kernel_ms is not None else []
    marks += ["# wrong"] if wrong else []
    marks += ["# no_compile"] if no_compile else []
    marks += ["# big"] if big else []
    return "\n".join(marks) + "\nimport torch\n\n\nclass ModelNew(torch.nn.Module):\n    pass\n"


def write_solution(root: Path, key: str, text: str) -> Path:
    path = root / f"{key}.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def example_cpu_solution(root: Path, key: str) -> Path:
    """The example's real CPU workspace solution, as `root/KEY/`."""
    target = root / key
    shutil.copytree(EXAMPLES / "solution_cpu", target)
    return target


class FakeEvaluator:
    """Async, deterministic: eager 2.0 ms and torch.compile 1.5 ms for every task; the solution's
    markers decide (`fake_solution`), the agent's untouched starting point is wrong, a task whose
    code raises is a task error. `delay` seconds per evaluation; after `stall_after` evaluations the
    next ones never finish (a run to kill at a known point); the first `overlap` evaluations wait for
    one another (surely in flight together); `calls` lists (task name, solution digest)."""

    capacity = 2

    def __init__(self, delay: float = 0.0, crowded_machine: bool = False, stall_after: int | None = None,
                 overlap: int = 0):
        self.delay, self.crowded_machine, self.stall_after = delay, crowded_machine, stall_after
        self.gate = StartGate(overlap) if overlap else None
        self.calls: list[tuple[str, str]] = []
        self.in_flight = 0

    async def evaluate(self, task, solution, config: EvalConfig | None = None) -> EvalResult:
        self.calls.append((task.name, solution.digest))
        if self.stall_after is not None and len(self.calls) > self.stall_after:
            await asyncio.Event().wait()
        self.in_flight += 1
        crowded = self.in_flight > 1          # started beside another one ...
        started = len(self.calls)
        try:
            if self.gate:
                await self.gate.async_wait()
            if self.delay:
                await asyncio.sleep(self.delay)
            crowded = crowded or len(self.calls) > started   # ... or another one started while it ran
        finally:
            self.in_flight -= 1
        result = fake_result(task, solution)
        if crowded and "# big" in solution.entry_code:
            result.correct, result.error = False, EvalError("verify", "torch.OutOfMemoryError: CUDA out of memory.")
        if "# crowded machine" in solution.entry_code and self.crowded_machine:   # another run holds the GPU
            result = EvalResult(task=task.name, backend="cpu", device="cpu", error=EvalError(
                "task", "the task's reference failed on an input set: OutOfMemoryError: CUDA out of memory."))
        return result


class CountingEvaluator(FakeEvaluator):
    """A FakeEvaluator of capacity 4 that records the most evaluations it had in flight at once."""

    capacity = 4
    most = 0

    async def evaluate(self, task, solution, config=None):
        self.most = max(self.most, self.in_flight + 1)
        return await super().evaluate(task, solution, config)


# A GPU whose usable share (USABLE of it) is 6.5 GiB: room for two of the fake KernelBench's small
# tasks' evaluation reservations (memory.EvalMemory.admission: 3 GiB each, plus their tiny tensors), not three.
TWO_EVALUATIONS_GPU_BYTES = int(6.5 * (1 << 30) / USABLE)


def fake_result(task, solution) -> EvalResult:
    text = "\n".join(solution.files.values())
    r = EvalResult(task=task.name, backend="cpu", device="cpu")
    if "reference is broken" in task.code:
        r.error = EvalError("task", "the task's reference failed: RuntimeError: reference is broken")
        return r
    if "# no_compile" in text:
        r.error = EvalError("compile", "model_new.py:1: SyntaxError")
    elif "# wrong" in text or "NotImplementedError" in text:   # the workspace's starting point raises
        r.compiled = True
        r.error = EvalError("verify", "wrong output on input set 1", "correctness")
    else:
        r.compiled = r.correct = True
        match = re.search(r"kernel_ms=([0-9.]+)", text)
        r.kernel_ms = float(match[1]) if match else 1.0
        r.eager_ms, r.compile_ms = 2.0, 1.5
        r.speedup_vs_eager, r.speedup_vs_compile = 2.0 / r.kernel_ms, 1.5 / r.kernel_ms
    r.reward = milestone_reward(r.correct, r.kernel_ms, r.eager_ms, r.compile_ms)
    return r
