"""`cuda-agent baseline`: eager and torch.compile times of every selected task, into the environment's
baseline store (`measure_baselines`), recorded in the run's SQLite.

Several tasks run at once per GPU (`per_gpu`): builds and input draws use the CPU while timed calls
take the GPU one at a time (the device lock). A task starts once its estimated memory fits
(`memory.py`), slow groups first (long compilations overlap short tasks); one out of memory is retried
alone at the end (`schedule.run_jobs`), else recorded `out_of_memory`. Store entries for this device,
torch and settings are reused (`stored`) unless `force`; tasks an earlier session recorded are skipped.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import nullcontext
from dataclasses import asdict
from typing import Callable

from cuda_agent.bench.memory import USABLE, DeviceMemory, footprints, measurement_need, reservation
from cuda_agent.bench.progress import RunProgress
from cuda_agent.bench.schedule import Deadline, is_out_of_memory, run_jobs, slow_first
from cuda_agent.bench.selection import BenchTask
from cuda_agent.bench.store import BaselineRecord, RunStore
from cuda_agent.env.config import EvalConfig

def stored_entry(task: BenchTask, config: EvalConfig, backend: str, device: str, torch_version: str):
    from cuda_agent.env.run.baselines import BaselineStore, entry_key, timing_settings

    key = entry_key(task.task.digest, device, torch_version, timing_settings(config, backend))
    entry = BaselineStore(config.cache_dir).get(key)
    complete = entry is not None and (entry.compile is not None or entry.compile_error is not None
                                      or not config.compile_baseline)
    return (key, entry) if complete else (key, None)


async def measure_all(store: RunStore, session_id: int, tasks: list[BenchTask], config: EvalConfig, *,
                      gpus: list[int | None], devices: dict, per_gpu: int, deadline: Deadline,
                      progress: RunProgress, force: bool = False, measure: Callable | None = None,
                      gpu_memory: dict | None = None) -> int:
    """Measure what the run has not recorded; returns the number of tasks left for a resume.
    `devices` maps each GPU index (None on the CPU backend) to its name, `gpu_memory` to its bytes
    (None: no admission by memory); `measure` stands in for `measure_baselines` in tests."""
    import torch

    if measure is None:
        from cuda_agent.env.run.baseline_run import measure_baselines as measure
    backend = config.resolved_backend()
    done = {b.task_key for b in store.baselines()}
    todo = [t for t in slow_first(tasks) if t.key not in done]
    progress.already(len(tasks) - len(todo), f"{len(tasks) - len(todo)} of {len(tasks)} tasks already recorded; "
                                             f"{len(todo)} to measure")
    budgets = {g: DeviceMemory(int(USABLE * total)) for g, total in (gpu_memory or {}).items()}
    sizes = await asyncio.to_thread(footprints, todo) if budgets and todo else {}
    free: asyncio.Queue = asyncio.Queue()
    for _ in range(max(1, per_gpu)):
        for gpu in gpus:
            free.put_nowait(gpu)

    def record(t: BenchTask, run, gpu, status: str | None = None, oom_retries: int = 0, store_key=None) -> None:
        entry = run.entry
        if status is None:
            status = "measured" if entry is not None else ("out_of_memory" if is_out_of_memory(run.error) else "broken")
        store.record_baseline(BaselineRecord(
            task_key=t.key, status=status, session_id=session_id, device=entry.device if entry else devices.get(gpu),
            torch=entry.torch if entry else torch.__version__,
            eager_ms=entry.eager_ms if entry else None, compile_ms=entry.compile_ms if entry else None,
            compile_error=entry.compile_error if entry else None, error=run.error, store_key=store_key,
            oom_retries=oom_retries, seconds=round(run.seconds, 3), entry=json.dumps(asdict(entry)) if entry else None,
            steps=json.dumps(run.steps) if run.steps else None))
        progress.finished(t.key, status, _detail(entry, run.error))

    async def one(t: BenchTask, alone: bool) -> bool:
        if alone:
            progress.note(f"{t.key}: out of GPU memory beside other tasks; measuring it alone")
        gpu = await free.get()
        try:
            key, entry = stored_entry(t, config, backend, devices.get(gpu, ""), torch.__version__)
            if entry is not None and not force:
                record(t, _Stored(entry), gpu, "stored", store_key=key)
                return False
            budget = budgets.get(gpu)
            need = 0 if budget is None else budget.budget if alone else \
                reservation(measurement_need(sizes.get(t.key)), budget.budget, per_gpu)
            async with budget.reserved(need) if budget else nullcontext():
                run = await asyncio.to_thread(measure, t.task, config, gpu=gpu)
        finally:
            free.put_nowait(gpu)
        if run.entry is None and is_out_of_memory(run.error) and not alone:
            return True   # measured again once nothing else holds memory
        record(t, run, gpu, oom_retries=int(alone), store_key=key)
        return False

    return await run_jobs(todo, one, per_gpu * len(gpus), deadline)


class _Stored:
    """A store entry in the shape of a measurement (`BaselineRun`)."""

    def __init__(self, entry):
        self.entry, self.error, self.seconds, self.steps = entry, None, 0.0, {}


def _detail(entry, error: str | None) -> str:
    if entry is None:
        lines = (error or "").strip().splitlines()
        return lines[-1][:160] if lines else ""
    compile_part = f"compile {entry.compile_ms:.4g} ms" if entry.compile_ms else \
        f"compile failed: {(entry.compile_error or '').strip()[:80]}"
    return f"eager {entry.eager_ms:.4g} ms, {compile_part}"
