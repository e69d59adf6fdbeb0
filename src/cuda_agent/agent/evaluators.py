"""Any evaluator, called from the blocking code that runs the workspace's commands and the final
re-evaluation.

An evaluator is a plain callable `(task, solution, config) -> EvalResult` (`cuda_agent.env.evaluate`,
a fake in tests) or an object with `async def evaluate(task, solution, config=None) -> EvalResult`
(`EvalPool`, an evaluation service). When a session is driven asynchronously, its blocking calls run
in worker threads and an async evaluator's coroutine goes to the loop driving the session, so one
pool serves every session of that loop; driven synchronously, the coroutine runs on a private loop.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from cuda_agent.agent.workspace import Evaluator, default_evaluator
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution, Task


class LoopEvaluator:
    """An async `evaluate`, callable from a thread other than the event loop's."""

    def __init__(self, evaluate):
        self._evaluate = evaluate
        self.loop: asyncio.AbstractEventLoop | None = None   # the loop of the last async driver

    def __call__(self, task: Task, solution: Solution, config: EvalConfig) -> EvalResult:
        coroutine = self._evaluate(task, solution, config)
        loop = self.loop
        if loop is not None and not loop.is_closed() and loop is not _running_loop():
            return asyncio.run_coroutine_threadsafe(coroutine, loop).result()
        return asyncio.run(coroutine)   # driven synchronously (inside a running loop this raises: use astep)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def blocking_evaluator(evaluator: Any) -> Evaluator:
    """`evaluator` as a blocking callable; None means the local `evaluate` (kept as is: the workspace
    recognises it and stops early for compile and verify)."""
    if evaluator is None:
        return default_evaluator
    evaluate = getattr(evaluator, "evaluate", None)
    if evaluate is not None and inspect.iscoroutinefunction(evaluate):
        return LoopEvaluator(evaluate)
    if callable(evaluator):
        return evaluator
    raise TypeError(f"an evaluator is a callable (task, solution, config) or has an async evaluate(); "
                    f"got {type(evaluator).__name__}")
