"""GPU memory admission for concurrent baseline measurements and evaluations.

KernelBench has tasks whose inputs alone take 4-17 GB (level 1's elementwise ops, reductions and
pooling on 4096 x 393216 tensors): a few of those measured at once run a GPU out of memory. Each
task's footprint is read once, on the meta device (no memory, no GPU) in a child process, and a
measurement or an evaluation starts only when its reservation fits what the GPU has left. The
reservations are the memory model's (env/infra/memory.py): `measurement_memory` for a baseline
measurement, `EvalMemory.admission` for an evaluation; a task whose footprint is unknown takes a fair
share of the GPU. An underestimate is caught by the out-of-memory retry (`schedule.run_jobs`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path

from cuda_agent.bench.selection import BenchTask
from cuda_agent.env.config import default_cache_dir
from cuda_agent.env.infra.memory import evaluation_memory, measurement_memory
from cuda_agent.tasks.footprint import Footprint

USABLE = 0.85          # of a GPU's memory, for measurements

_FOOTPRINTS = """
import json, sys
from cuda_agent.tasks.footprint import measure_footprint
from cuda_agent.tasks.task import Task
found = [measure_footprint(Task(f"task{i}", code)) for i, code in enumerate(json.load(sys.stdin))]
print(json.dumps([None if fp is None else [fp.input_bytes, fp.output_bytes, fp.param_bytes] for fp in found]))
"""


def footprints(tasks: list[BenchTask], timeout: float = 300.0, processes: int | None = None,
               cache: Path | None = None) -> dict[str, Footprint | None]:
    """Each task's footprint (None where the meta device cannot tell), from child processes side by
    side (a recurrent model's forward takes seconds on meta: KernelBench's LSTMs and GRUs). Footprints
    found are kept in `cache` (default: the cache folder's `footprints/`) by the digest of the task's
    code, so a later run reads them instead of running the models again."""
    folder = cache or default_cache_dir() / "footprints"
    known: dict[str, Footprint | None] = {}
    todo = []
    for t in tasks:
        kept = _kept(folder, t.task.code)
        if kept is not None:
            known[t.key] = kept
        else:
            todo.append(t)
    found = _measured(todo, timeout, processes)
    for t in todo:
        if found[t.key] is not None:
            _keep(folder, t.task.code, found[t.key])
    return {**known, **found}


def _digest(code: str) -> str:
    return hashlib.sha256(code.encode()).hexdigest()[:32]


def _kept(folder: Path, code: str) -> Footprint | None:
    try:
        return Footprint(*json.loads((folder / f"{_digest(code)}.json").read_text()))
    except (OSError, ValueError, TypeError):
        return None


def _keep(folder: Path, code: str, fp: Footprint) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_digest(code)}.json"
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps([fp.input_bytes, fp.output_bytes, fp.param_bytes]))
        tmp.replace(path)   # whole or not at all, whoever writes at once
    except OSError:
        pass   # a read-only cache only costs the next run the time again


def _measured(tasks: list[BenchTask], timeout: float, processes: int | None) -> dict[str, Footprint | None]:
    if not tasks:
        return {}
    n = max(1, min(len(tasks), processes or os.cpu_count() or 1, 8))
    chunks = [tasks[i::n] for i in range(n)]   # every n-th task: the slow neighbours spread out

    def measure(chunk: list[BenchTask]) -> list:
        try:
            out = subprocess.run([sys.executable, "-c", _FOOTPRINTS], input=json.dumps([t.task.code for t in chunk]),
                                 capture_output=True, text=True, timeout=timeout)
            return json.loads(out.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            return [None] * len(chunk)

    with ThreadPoolExecutor(n) as threads:
        found = list(threads.map(measure, chunks))
    return {t.key: None if fp is None else Footprint(*fp)
            for chunk, sizes in zip(chunks, found) for t, fp in zip(chunk, sizes)}


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


def reservation(need: int | None, budget: int, per_gpu: int) -> int:
    """Bytes a task's run reserves: what the memory model says it needs, or a fair share when unknown."""
    return budget // max(1, per_gpu) if need is None else need


def measurement_need(fp: Footprint | None) -> int | None:
    """A baseline measurement's bytes on its GPU (the memory model), None when unknown."""
    return None if fp is None else measurement_memory(fp)


def evaluation_need(fp: Footprint | None, config=None) -> int | None:
    """An evaluation's bytes on its GPU (the memory model, verified on `config`'s trials), None when unknown."""
    from cuda_agent.env.config import EvalConfig

    trials = (config or EvalConfig()).num_correct_trials
    return None if fp is None else evaluation_memory(fp, "cuda", trials).admission


class AdmittedEvaluator:
    """An evaluator (an `EvalPool` or the Ray service) whose evaluations start only when their
    reservation fits `memory` (`cuda-agent bench`, solutions and agent episodes alike). `sizes` maps a
    task's digest to its footprint (None: unknown, a fair share of `slots`). The sum of what runs at
    once stays within one GPU's budget, so it fits whichever GPUs the evaluator uses."""

    def __init__(self, evaluator, memory: DeviceMemory, sizes: dict[str, Footprint | None], slots: int):
        self.evaluator, self.memory, self.sizes, self.slots = evaluator, memory, sizes, slots
        self.capacity = getattr(evaluator, "capacity", slots)

    async def evaluate(self, task, solution, config=None):
        need = reservation(evaluation_need(self.sizes.get(task.digest), config), self.memory.budget, self.slots)
        async with self.memory.reserved(need):
            return await self.evaluator.evaluate(task, solution, config)


async def admitted(evaluator, tasks: list[BenchTask], gpu_memory: int | None, slots: int):
    """`evaluator` behind memory admission for `tasks` (their footprints read once), or as it is
    when `gpu_memory` is None (the CPU backend, no GPU visible)."""
    if not gpu_memory or not tasks:
        return evaluator
    found = await asyncio.to_thread(footprints, tasks)
    by_digest = {t.task.digest: found.get(t.key) for t in tasks}
    return AdmittedEvaluator(evaluator, DeviceMemory(int(USABLE * gpu_memory)), by_digest, slots)
