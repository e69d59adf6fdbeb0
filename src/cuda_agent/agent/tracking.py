"""The best candidate of an episode: every verified result is offered, ranked by reward, then speedup
over torch.compile, then over eager. What the model claims (results read back from the workspace,
which it could forge) is tracked beside what we evaluated ourselves."""

from __future__ import annotations

from dataclasses import dataclass

from cuda_agent.env.result import EvalResult
from cuda_agent.env.reward import decisive_speedup
from cuda_agent.tasks import Solution

VERIFYING = ("verify", "profile")   # commands whose success makes a candidate (compile checks less)


@dataclass
class Candidate:
    solution: Solution
    result: EvalResult
    turn: int
    trusted: bool                        # evaluated by us (a tool call), not read from a bash record


def rank(result: EvalResult | None) -> tuple | None:
    """Sort key of a verified result: reward, then speedup vs torch.compile, then vs eager, each the
    figure the reward reads (`reward.decisive`: no higher than the ratio of the calls' totals).
    A result verified without timing counts as reward 1 (correct, speed unknown)."""
    if result is None or not result.correct:
        return None
    reward = result.reward if result.reward is not None and result.kernel_ms is not None else 1
    return (reward, decisive_speedup(result, "compile") or 0.0, decisive_speedup(result, "eager") or 0.0)


class BestTracker:
    """The best candidate overall and the best one we evaluated ourselves (claims can be forged)."""

    def __init__(self):
        self.best: Candidate | None = None
        self.best_trusted: Candidate | None = None

    def offer(self, candidate: Candidate) -> bool:
        key = rank(candidate.result)
        if key is None:
            return False
        if candidate.trusted and (self.best_trusted is None or key > rank(self.best_trusted.result)):
            self.best_trusted = candidate
        if self.best is None or key > rank(self.best.result):
            self.best = candidate
            return True
        return False
