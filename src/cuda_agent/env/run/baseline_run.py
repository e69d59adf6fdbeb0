"""Baselines alone (`cuda-agent baseline`, `cuda-agent cache verify`): a judge run of its own.

A judge, no candidate: it sets up the task's model, compiles torch.compile, and times eager and
torch.compile paired call by call on fresh draws, as every evaluation does; the times go to the
baseline store (baselines.py). Compilation and input drawing run in parallel with other
measurements; only the timed calls hold the device (the judge takes its lock itself).
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult, Timing
from cuda_agent.env.run.baselines import BaselineEntry, BaselineStore, keep_graph_fields, task_entry, task_key
from cuda_agent.env.run.schedule import fresh_seed, baseline_calls
from cuda_agent.env.run.worker_run import WorkerRun, Failed, job_root
from cuda_agent.env.workers import messages as msg
from cuda_agent.tasks.task import Task, TaskError


@dataclass
class BaselineRun:
    entry: "object | None"          # BaselineEntry, None when the task is broken
    error: str | None = None
    seconds: float = 0.0
    # where the seconds went: start (the judge's process and the task's model), compile (torch.compile
    # and its warm-up), timing (the timed calls), of which wait (waiting for the device's lock)
    steps: dict = field(default_factory=dict)


def measure_baselines(task: Task, config: EvalConfig | None = None, *, gpu: int | None = None,
                      calls: int | None = None, store: bool = True,
                      progress: Callable[[str], None] | None = None) -> BaselineRun:
    """Time the task's eager and torch.compile references on their own (no candidate), paired call by
    call on fresh draws, as every evaluation does, and (with `store`) save them in the baseline store.
    `calls`: that many calls in all (warm-up included) instead of the configured counts, which a slow
    task's calls shorten (schedule.baseline_calls). Never raises for anything the task does."""
    config = config or EvalConfig()
    backend = config.resolved_backend()
    started = time.monotonic()
    job_dir = Path(tempfile.mkdtemp(prefix="cuda-agent-job-", dir=job_root()))
    result = EvalResult(task=task.name, backend=backend, protocol=config.protocol)
    run = _BaselineMeasurement(task, config, backend, job_dir, gpu, result, progress or (lambda text: None))
    try:
        entry = run.measure(started, calls, store)
        return BaselineRun(entry, None, time.monotonic() - started, run.steps)
    except Failed as failure:
        return BaselineRun(None, failure.error.message, time.monotonic() - started, run.steps)
    except TaskError as exc:
        return BaselineRun(None, str(exc), time.monotonic() - started, run.steps)
    finally:
        run.shutdown()
        shutil.rmtree(job_dir, ignore_errors=True)


class _BaselineMeasurement(WorkerRun):
    """A judge alone, timing the task's references; `steps` says where the time went (BaselineRun)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.steps: dict[str, float] = {}

    def _step(self, name: str, since: float) -> float:
        now = time.monotonic()
        self.steps[name] = round(now - since, 3)
        return now

    def measure(self, started: float, calls: int | None, store: bool) -> BaselineEntry:
        """The task's eager and torch.compile times (a failure raises Failed or TaskError)."""
        task, config, backend, say = self.task, self.config, self.backend, self.say
        task.check_syntax()
        self.judge = self._start("judge")
        self._send_judge_job(candidate=False)   # no candidate to hand the model's weights to
        self._judge_ready()
        mark = self._step("start", started)
        compiled = {"ok": False, "error": "not asked for"}
        if config.compile_baseline:
            say("compiling the torch.compile baseline")
            self.judge.channel.send(msg.Compile())
            compiled = self._ask(self.judge, config.timeout_reference, "task")
        mark = self._step("compile", mark)
        say("timing eager" + (" and torch.compile" if compiled["ok"] else ""))
        if calls:   # as asked (`cache verify`)
            warmup = min(config.warmup, calls // 2)
            timed = calls - warmup
        else:
            warmup, timed = config.warmup, config.timed_iters(backend)
        pairs, held, waited = [], [], 0.0
        i = 0
        while i < warmup + timed:
            asked = time.monotonic()
            self.judge.channel.send(msg.JudgeCall(seed=fresh_seed(), transform=None, time=True, compile=compiled["ok"]))
            answer = self._ask(self.judge, config.timeout_reference, "task")   # the judge locks the device itself
            waited += answer.get("lock_wait_s", 0.0)
            held.append(time.monotonic() - asked - answer.get("lock_wait_s", 0.0))
            if "task_error" in answer:
                raise Failed("task", answer["task_error"])
            if i >= warmup:   # the first calls warm up
                pairs.append(answer)
            elif calls is None and i == min(2, warmup - 1):   # slow calls: fewer of them (baseline_calls)
                warmup, timed = baseline_calls(statistics.median(held), config.warmup, timed)
            i += 1
        eager = Timing.from_samples([p["eager_ms"] for p in pairs])
        compile_timing = Timing.from_samples([p["compile_ms"] for p in pairs]) if compiled["ok"] else None
        entry = task_entry(task, self.result.device, config, backend, eager, compile_timing,
                           None if compiled["ok"] else compiled.get("error"))
        self._step("timing", mark)
        self.steps["wait"] = round(waited, 3)
        if store:
            BaselineStore(config.cache_dir).update(task_key(task, self.result.device, config, backend),
                                                   lambda kept: keep_graph_fields(entry, kept))
        return entry
