"""Verifying a solution at a second size of its task (strict protocol, `EvalConfig.other_scale`), so a
kernel that hard-codes the task's sizes is caught: the generalisation check.

The second task is the first with its input sizes halved by `tasks/scale.py` (the model and its
weights as they were); the solution is verified on it as `verify` does, in workers of its own. A
task `scale_task` cannot shrink (no size that only its inputs read, sizes already at their
smallest, sizes that must agree) is verified at its own size only, and nothing is said. A wrong
output or a crash at the second size is the rule `fixed-shape`; another rule keeps its name; the
second task's own failure (its reference) says nothing about the solution and passes.
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Callable

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.infra.task_child import estimate_footprint
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.run.worker_run import Failed
from cuda_agent.tasks.scale import Scaled, scale_task
from cuda_agent.tasks.solution import Solution
from cuda_agent.tasks.task import Task, TaskError

FACTOR = 0.5
# failures at the second size that mean "does not follow the sizes": named fixed-shape
_SHAPE_FAILURES = {rules.CORRECTNESS.name, rules.CRASH.name, rules.NUMERICALLY_FRAGILE.name,
                   rules.OUTPUT_LAYOUT.name, rules.UNCOMPARABLE_OUTPUT.name, None}


def second_size(task: Task, backend: str | None = None, gpu: int | None = None) -> Scaled | None:
    """The task at its second size, or None where it has none."""
    try:
        scaled = scale_task(task, FACTOR, partial(estimate_footprint, backend=backend, gpu=gpu))
    except (TaskError, ValueError):
        return None
    return scaled if scaled.sizes else None


def verify_other_scale(task: Task, solution: Solution, config: EvalConfig, gpu: int | None,
                       evaluate: Callable) -> Failed | None:
    """The failure of `solution` at the task's second size, or None (passed, or no second size);
    `evaluate` is evaluation.evaluate (passed in: that module imports this one)."""
    scaled = second_size(task, config.resolved_backend(), gpu)
    if scaled is None:
        return None
    second = replace(config, other_scale=False, unscored=False, baselines=False)   # a pre-started pair where kept
    result = evaluate(scaled.task, solution, second, gpu=gpu, stop_after="verify")
    error = result.error
    if error is None or error.phase in ("task", "internal"):
        return None
    rule = rules.FIXED_SHAPE if error.rule in _SHAPE_FAILURES else error.rule
    return Failed("verify", f"at a second size of the task ({scaled.describe()}), where the solution must follow "
                            f"the inputs' sizes as the reference does: {error.message}", rule=rule)
