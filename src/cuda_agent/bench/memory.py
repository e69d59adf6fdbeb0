"""GPU memory admission for concurrent baseline measurements and evaluations.

Some KernelBench tasks' inputs alone take 4-17 GB (level 1 ops on 4096 x 393216 tensors), so a few at
once run a GPU out of memory. Each task's input size is read once on the meta device (a child process,
no GPU); work starts when its reservation fits what the GPU has left: a baseline about three times the
inputs (inputs, eager and compiled outputs) plus a margin, an evaluation about six times (judge's and
candidate's inputs and outputs) plus 3 GiB (two CUDA contexts, the candidate's poisoned allocator
fill). An underestimate meets the out-of-memory retry (`schedule.run_jobs`).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from contextlib import asynccontextmanager

from cuda_agent.bench.selection import BenchTask

GiB = 1 << 30
FACTOR = 3             # inputs, eager output, torch.compile output
MARGIN = 1 * GiB       # weights, workspaces, the CUDA context
USABLE = 0.85          # of a GPU's memory, for measurements
EVAL_FACTOR = 6        # an evaluation: judge and candidate each hold inputs and outputs (module docstring)
EVAL_MARGIN = 3 * GiB  # two CUDA contexts, the candidate's poisoned allocator fill

_SIZES = """
import json, sys, types, torch
sizes = []
for code in json.load(sys.stdin):
    module = types.ModuleType("task")
    try:
        exec(compile(code, "<task>", "exec"), module.__dict__)
        with torch.device("meta"):
            inputs = module.get_inputs()
        sizes.append(sum(t.numel() * t.element_size() for t in inputs if isinstance(t, torch.Tensor)))
    except BaseException:
        sizes.append(None)
print(json.dumps(sizes))
"""


def input_sizes(tasks: list[BenchTask], timeout: float = 300.0) -> dict[str, int | None]:
    """Bytes of each task's inputs (None where the meta device cannot tell), from one child process."""
    try:
        out = subprocess.run([sys.executable, "-c", _SIZES], input=json.dumps([t.task.code for t in tasks]),
                             capture_output=True, text=True, timeout=timeout)
        sizes = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        sizes = [None] * len(tasks)
    return {t.key: size for t, size in zip(tasks, sizes)}


class DeviceMemory:
    """What measurements on one GPU have reserved; `reserved(n)` waits until n bytes are free (a
    reservation larger than the whole budget waits for an idle GPU)."""

    def __init__(self, budget: int):
        self.budget = budget
        self.free = budget
        self.changed = asyncio.Condition()

    @asynccontextmanager
    async def reserved(self, amount: int):
        amount = min(amount, self.budget)
        async with self.changed:
            await self.changed.wait_for(lambda: self.free >= amount)
            self.free -= amount
        try:
            yield
        finally:
            async with self.changed:
                self.free += amount
                self.changed.notify_all()


def reservation(input_bytes: int | None, budget: int, per_gpu: int, factor: int = FACTOR,
                margin: int = MARGIN) -> int:
    """Bytes a task's measurement reserves: factor x inputs + margin, or a fair share when unknown."""
    if input_bytes is None:
        return budget // max(1, per_gpu)
    return factor * input_bytes + margin


class AdmittedEvaluator:
    """An evaluator (an `EvalPool` or the Ray service) whose evaluations start only when their
    reservation fits `memory` (`cuda-agent bench`, solutions and agent episodes alike). `sizes` maps a
    task's digest to its input bytes (None: unknown, a fair share of `slots`). The sum of what runs at
    once stays within one GPU's budget, so it fits whichever GPUs the evaluator uses."""

    def __init__(self, evaluator, memory: DeviceMemory, sizes: dict[str, int | None], slots: int):
        self.evaluator, self.memory, self.sizes, self.slots = evaluator, memory, sizes, slots
        self.capacity = getattr(evaluator, "capacity", slots)

    async def evaluate(self, task, solution, config=None):
        need = reservation(self.sizes.get(task.digest), self.memory.budget, self.slots, EVAL_FACTOR, EVAL_MARGIN)
        async with self.memory.reserved(need):
            return await self.evaluator.evaluate(task, solution, config)


async def admitted(evaluator, tasks: list[BenchTask], gpu_memory: int | None, slots: int):
    """`evaluator` behind memory admission for `tasks` (their input sizes read once), or as it is
    when `gpu_memory` is None (the CPU backend, no GPU visible)."""
    if not gpu_memory or not tasks:
        return evaluator
    sizes = await asyncio.to_thread(input_sizes, tasks)
    by_digest = {t.task.digest: sizes.get(t.key) for t in tasks}
    return AdmittedEvaluator(evaluator, DeviceMemory(int(USABLE * gpu_memory)), by_digest, slots)
