"""A whole run: claim the run folder (or resume it), record the session and environment, do the
work, write the report. The CLI parses options into these calls; tests call them directly.

    run_baseline(spec)                                     cuda-agent baseline
    run_folder(spec, solutions_dir, evaluator)             cuda-agent bench --solutions DIR
    run_agent(spec, make_client, agent_config, evaluator)  cuda-agent bench --model NAME
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Awaitable, Callable

from cuda_agent.bench.metrics import INFRASTRUCTURE
from cuda_agent.bench.progress import RunProgress
from cuda_agent.bench.schedule import Deadline
from cuda_agent.bench.selection import BenchTask
from cuda_agent.bench.store import RunStore
from cuda_agent.env.run.baselines import timing_settings
from cuda_agent.env.config import EvalConfig

RETRYABLE = INFRASTRUCTURE   # our side or the endpoint's: not scored; --retry-failed runs them again


@dataclass
class RunSpec:
    out: Path
    tasks: list[BenchTask]
    config: EvalConfig
    resume: bool = False
    max_minutes: float | None = None     # no new work starts after this (the rest waits for --resume)
    retry_failed: bool = False
    quiet: bool = False
    argv: list[str] = field(default_factory=list)
    reference_times: dict | None = None  # KernelBench's own timings, for the report
    report: bool = True                  # write RUN/report.md and RUN/report.html at the end


@dataclass
class RunOutcome:
    run_dir: Path
    left: int                            # work not started (time was up, or stopped): run again with --resume
    report: tuple[Path, Path] | None
    stopped: str | None = None           # why the run stopped before its work or time was done


def eval_settings(config: EvalConfig) -> dict:
    """What decides the meaning of a run's numbers; a resume must keep them."""
    # the timing settings as the baseline store keys them (settle and the hold absent when off, so
    # runs recorded before those options still resume)
    return {**timing_settings(config, config.resolved_backend()), "protocol": config.protocol,
            "iters": config.iters, "warmup": config.warmup, "trials": config.num_correct_trials,
            "atol": config.atol, "rtol": config.rtol, "compile_baseline": config.compile_baseline,
            **({"precision": config.precision} if config.precision is not None else {})}   # absent: every call timed


def _run(spec: RunSpec, kind: str, settings: dict, title: str, total: int,
         work: Callable[[RunStore, int, RunProgress, Deadline], Awaitable[int]]) -> RunOutcome:
    from cuda_agent.bench.environment import describe_environment
    from cuda_agent.bench.report import write_report

    store = RunStore(spec.out)
    try:
        store.claim(kind, settings, spec.resume)
        store.add_tasks(spec.tasks)
        config = {**spec.config.to_dict(), **settings, "max_minutes": spec.max_minutes, "pid": os.getpid()}
        session_id = store.begin_session(spec.argv, config, describe_environment(spec.config.resolved_backend()))
        status, left = "interrupted", total
        deadline = Deadline(spec.max_minutes)
        try:
            with RunProgress(title, total, quiet=spec.quiet) as progress:
                left = asyncio.run(work(store, session_id, progress, deadline))
            status = "finished" if left == 0 else "stopped"
        finally:
            store.end_session(session_id, status)
    finally:
        store.close()
    report = write_report(spec.out, reference=spec.reference_times) if spec.report else None
    return RunOutcome(spec.out, left, report, deadline.stopped)


def run_baseline(spec: RunSpec, *, gpus: list[int] | None = None, per_gpu: int | None = None,
                 force: bool = False, measure=None) -> RunOutcome:
    from cuda_agent.bench.baseline_runs import measure_all
    from cuda_agent.bench.environment import torch_probe

    backend = spec.config.resolved_backend()
    memory = None
    if backend == "cuda":
        probe = torch_probe("cuda")
        names, totals = probe.get("gpus") or [], probe.get("gpu_memory") or []
        gpus = list(gpus if gpus is not None else range(len(names)))
        if not gpus:
            raise RuntimeError("no GPU visible for the cuda backend (use --backend cpu)")
        devices = {g: names[g] if g < len(names) else "" for g in gpus}
        memory = {g: totals[g] for g in gpus if g < len(totals)} or None
    else:
        gpus, devices = [None], {None: "cpu"}
    per_gpu = per_gpu or default_baseline_concurrency(backend)
    settings = {**eval_settings(spec.config), "cache_dir": str(Path(spec.config.cache_dir).resolve())}

    async def work(store, session_id, progress, deadline):
        return await measure_all(store, session_id, spec.tasks, spec.config, gpus=gpus, devices=devices,
                                 per_gpu=per_gpu, deadline=deadline, progress=progress, force=force, measure=measure,
                                 gpu_memory=memory)

    return _run(spec, "baseline", settings, "baselines", len(spec.tasks), work)


def default_baseline_concurrency(backend: str) -> int:
    """Tasks measured at once per GPU: a measurement spends most of its wall time on one CPU core (the
    judge's start, torch.compile's tracing and code generation, compiled in the judge on one thread)
    and holds the GPU only call by call, so three quarters of the cores, at most 12: the rest stay free
    for the processes launching the timed calls (a starved launcher stretches the GPU time it
    measures). GPU memory is guarded by admission (`memory.py`), not by this count."""
    if backend != "cuda":
        return 1
    return max(1, min(12, (os.cpu_count() or 4) * 3 // 4))


def smallest_gpu_memory(backend: str) -> int | None:
    """Bytes of this machine's smallest GPU (None on the CPU backend or when none is visible)."""
    from cuda_agent.bench.environment import torch_probe

    totals = torch_probe(backend).get("gpu_memory") or []
    return min(totals) if totals else None


def run_folder(spec: RunSpec, solutions_dir: Path, evaluator) -> RunOutcome:
    from cuda_agent.bench.score_folder import plan_attempts, score_folder

    solutions_dir = Path(solutions_dir).resolve()
    settings = {**eval_settings(spec.config), "mode": "solutions", "solutions": str(solutions_dir)}
    total = len(plan_attempts(spec.tasks, solutions_dir))

    memory = smallest_gpu_memory(spec.config.resolved_backend())

    async def work(store, session_id, progress, deadline):
        return await score_folder(store, session_id, spec.tasks, solutions_dir, evaluator, spec.config,
                                  workers=getattr(evaluator, "capacity", 4), deadline=deadline, progress=progress,
                                  retry=RETRYABLE if spec.retry_failed else (), gpu_memory=memory)

    return _run(spec, "bench", settings, "solutions", total, work)


def run_agent(spec: RunSpec, make_client: Callable[[], object], agent_config, evaluator, *, model: str,
              concurrency: int) -> RunOutcome:
    from cuda_agent.bench.agent_runs import run_agents

    settings = {**eval_settings(spec.config), "mode": "agent", "model": model, "turns": agent_config.max_turns}
    memory = smallest_gpu_memory(spec.config.resolved_backend())

    async def work(store, session_id, progress, deadline):
        return await run_agents(store, session_id, spec.tasks, make_client, evaluator, spec.config, agent_config,
                                concurrency=concurrency, deadline=deadline, progress=progress,
                                retry=RETRYABLE if spec.retry_failed else (), gpu_memory=memory)

    return _run(spec, "bench", settings, "episodes", len(spec.tasks), work)
