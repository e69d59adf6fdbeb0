"""A worker that never became ready (`Failed.not_started`: it died or stayed silent before any job was
sent to it) is the harness's failure, not the solution's: the evaluation is run once more from scratch
with workers started anew, and the result's warnings say so."""

from __future__ import annotations

from typing import Callable

from cuda_agent.env.result import EvalResult


def with_second_start(attempt: Callable[[bool], tuple[EvalResult, bool]]) -> EvalResult:
    """`attempt(fresh)`'s result, once more with `fresh` (workers started for it alone) where the first
    ended because a worker never became ready; a second such end stays the internal error it is, its
    message saying it was tried twice."""
    result, not_started = attempt(False)
    if not not_started:
        return result
    first = result.error.message
    result, not_started = attempt(True)
    if not_started:
        result.error.message = f"tried twice, the second time with workers started anew: {result.error.message}"
    result.warnings.append(f"{_gist(first)}; the evaluation was run again with workers started anew")
    return result


def _gist(message: str) -> str:
    """A message's first line, and its last where it has more (a log's last line: the exception)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return lines[0] + (f" ({lines[-1]})" if len(lines) > 1 else "")
