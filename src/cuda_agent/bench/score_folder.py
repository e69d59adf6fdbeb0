"""`cuda-agent bench --solutions DIR`: score a folder of existing solutions.

Each solution found for a task is one attempt; a task without one gets a `missing` attempt and a
malformed entry a `malformed` one (both fail the task, neither stops the run). Attempts run
concurrently against one evaluator (an `EvalPool`, or the Ray service) and are recorded as they
finish; a resume skips every attempt already recorded for the same solution entry. An evaluation
our evaluator failed (`internal_error`) is not scored; several in a row stop the run (`FailureStreak`).
On a GPU, an attempt starts only when its estimated memory fits beside the others' (`memory.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.bench.attempts import attempt_from_result, failed_attempt
from cuda_agent.bench.memory import admitted
from cuda_agent.bench.progress import RunProgress
from cuda_agent.bench.schedule import Deadline, FailureStreak, is_out_of_memory, run_jobs, slow_first
from cuda_agent.bench.selection import BenchTask
from cuda_agent.bench.solutions import SolutionRef, find_solutions
from cuda_agent.bench.store import RunStore
from cuda_agent.env.config import EvalConfig
from cuda_agent.tasks import SolutionError

MISSING = "(no solution)"


@dataclass
class Planned:
    task: BenchTask
    attempt: int
    ref: SolutionRef | None

    @property
    def source(self) -> str:
        return self.ref.label if self.ref else MISSING


def plan_attempts(tasks: list[BenchTask], solutions_dir: Path) -> list[Planned]:
    found = find_solutions(solutions_dir, tasks)
    planned = []
    for t in tasks:
        refs = found.get(t.key) or [None]
        planned += [Planned(t, i, ref) for i, ref in enumerate(refs)]
    return planned


async def score_folder(store: RunStore, session_id: int, tasks: list[BenchTask], solutions_dir: Path,
                       evaluator, config: EvalConfig, *, workers: int, deadline: Deadline,
                       progress: RunProgress, retry: tuple[str, ...] = (), gpu_memory: int | None = None) -> int:
    """Score what is not recorded yet (or was recorded with a verdict in `retry`); returns the number
    of attempts left for a resume. `gpu_memory`: bytes of the smallest GPU the evaluator uses (None:
    no admission by memory; the sum of what runs at once stays within one GPU's share, so it fits
    whichever GPUs the evaluator puts the attempts on)."""
    recorded = store.recorded_attempts(tuple(retry) + ("out_of_memory",))   # the machine's, not a verdict
    planned = plan_attempts(slow_first(tasks), solutions_dir)   # the longest start first: no lone tail
    todo = [p for p in planned if recorded.get((p.task.key, p.attempt)) != p.source]
    selected = {t.key for t in tasks}
    wanted = {(p.task.key, p.attempt) for p in planned}
    store.forget_attempts([k for k in store.recorded_attempts() if k[0] in selected and k not in wanted])
    progress.already(len(planned) - len(todo), f"{len(planned) - len(todo)} of {len(planned)} attempts already "
                                               f"recorded; {len(todo)} to score")

    # an attempt run again alone (out of memory beside others) has nothing beside it: its usual
    # reservation is granted at once
    unique = list({p.task.key: p.task for p in todo if p.ref is not None}.values())
    evaluator = await admitted(evaluator, unique, gpu_memory, workers)
    streak = FailureStreak(deadline, "evaluations")

    async def score(p: Planned, alone: bool) -> bool:
        key = p.task.key
        common = dict(session_id=session_id, source=p.source, solution_path=str(p.ref.path) if p.ref else None)
        if p.ref is None:
            store.record_attempt(failed_attempt(key, p.attempt, "missing", "no solution for this task", **common))
            progress.finished(key, "missing")
            return False
        try:
            solution = p.ref.load()
        except (SolutionError, FileNotFoundError) as exc:
            store.record_attempt(failed_attempt(key, p.attempt, "malformed", str(exc), **common))
            progress.finished(key, "malformed", str(exc))
            return False
        start = time.monotonic()
        try:
            result = await evaluator.evaluate(p.task.task, solution, config)
        except Exception as exc:   # the evaluator itself (a lost Ray actor): ours, retried with --retry-failed
            message = f"the evaluator failed: {type(exc).__name__}: {exc}"
            store.record_attempt(failed_attempt(key, p.attempt, "internal_error", message, **common))
            progress.finished(key, "internal_error", message)
            streak.note(message)
            return False
        if not result.correct and result.error is not None and is_out_of_memory(result.error.message) and not alone:
            return True   # evaluated again once nothing else holds GPU memory
        attempt = attempt_from_result(key, p.attempt, result, solution_digest=solution.digest,
                                      seconds=round(time.monotonic() - start, 3), **common)
        store.record_attempt(attempt)
        progress.finished(key, attempt.verdict, _detail(attempt))
        streak.note(attempt.error_message if attempt.verdict == "internal_error" else None)
        return False

    return await run_jobs(todo, score, workers, deadline)


def _detail(attempt) -> str:
    if attempt.correct and attempt.speedup_vs_eager:
        compile_part = f", {attempt.speedup_vs_compile:.2f}x vs compile" if attempt.speedup_vs_compile else ""
        return f"{attempt.speedup_vs_eager:.2f}x vs eager{compile_part}, reward {attempt.reward:g}"
    if attempt.error_message:
        first = attempt.error_message.strip().splitlines()[0] if attempt.error_message.strip() else ""
        return f"{attempt.error_phase}: {first[:120]}"
    return ""
