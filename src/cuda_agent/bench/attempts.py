"""An evaluation's outcome as a row of the run's record (`store.Attempt`)."""

from __future__ import annotations

import json

from cuda_agent.bench.metrics import INFRASTRUCTURE
from cuda_agent.bench.schedule import is_out_of_memory
from cuda_agent.bench.store import Attempt
from cuda_agent.env.result import EvalResult

MESSAGE_CHARS = 4000   # what the record keeps of an error message (the result JSON has it all)


def verdict_of(result: EvalResult) -> str:
    if result.error is not None and is_out_of_memory(result.error.message) and (
            result.task_error or result.error.phase == "internal"):
        # the reference (or the harness) found no GPU memory: the machine's state at the time (another
        # run beside this one), a verdict on neither the task nor the solution; a resume runs it again
        return "out_of_memory"
    if result.task_error:
        return "task_error"
    if result.error is not None and result.error.phase == "internal":
        return "internal_error"
    if result.correct:
        return "correct"
    return "incorrect" if result.compiled else "compile_error"


def attempt_from_result(task_key: str, attempt: int, result: EvalResult, *, verdict: str | None = None,
                        **extra) -> Attempt:
    error = result.error
    verdict = verdict or verdict_of(result)
    return Attempt(
        task_key=task_key, attempt=attempt, verdict=verdict,
        compiled=result.compiled, correct=result.correct,
        error_phase=error.phase if error else None, error_rule=error.rule if error else None,
        error_message=error.message[:MESSAGE_CHARS] if error else None,
        kernel_ms=result.kernel_ms, eager_ms=result.eager_ms, compile_ms=result.compile_ms,
        speedup_vs_eager=result.speedup_vs_eager, speedup_vs_compile=result.speedup_vs_compile,
        reward=None if verdict in ("out_of_memory", *INFRASTRUCTURE) else result.reward,   # no verdict: never scored
        baseline_source=result.baseline_source, device=result.device or None,
        protocol=result.protocol, result=json.dumps(result.to_dict()), **extra)


def failed_attempt(task_key: str, attempt: int, verdict: str, message: str, **extra) -> Attempt:
    """An attempt that never reached an evaluation (no solution, a malformed one, a failed episode).
    Its reward is -1 where the solution is to blame, None where the task or our side is."""
    unscored = verdict in ("task_error", "out_of_memory", *INFRASTRUCTURE)
    return Attempt(task_key=task_key, attempt=attempt, verdict=verdict, error_message=message[:MESSAGE_CHARS],
                   reward=None if unscored else -1, **extra)
