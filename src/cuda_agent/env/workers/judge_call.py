"""One call on its way through a judge's batch (judge.py): its draw, its reference output, and its
answer once settled."""

from __future__ import annotations

from cuda_agent.env.workers.common import short_traceback
from cuda_agent.env.workers.messages import Compare, JudgeCall


class JudgeCallState:
    """One call of a judge's batch on its way: its draw, its reference output, and its answer once
    that is settled early (a structured set the reference is not defined on, or a task error)."""

    def __init__(self, cmd: JudgeCall, trace):
        self.cmd, self.trace = cmd, trace
        self.compare = cmd.compare or Compare()
        self.transform, self.timed = cmd.transform, cmd.time
        self.inputs = self.again = self.reference = None
        self.reached = False        # the reference ran on its draw (its output may be let go since)
        self.bytes = 0
        self.extra: dict = {}
        self.answer: dict | None = None
        self.candidate = None       # a verification call's output read into host memory, or the error
        self.sampled = None         # the reference where the candidate was sampled, a reason to skip, or the error
        self.decoded = None         # the candidate's samples, decoded before the device was held

    def fail(self, exc: Exception) -> None:
        if self.transform:   # the reference is not defined on this structured set: nothing to compare
            self.answer = {"ok": True, "skipped": f"the reference fails on it ({type(exc).__name__})"}
        else:                # the task's own code failed on one of its draws
            self.answer = task_error(exc)


def task_error(exc: Exception) -> dict:
    """The answer for a call on which the task's own code failed."""
    return {"ok": False, "task_error": f"{type(exc).__name__}: {exc}\n{short_traceback(exc)}"}
