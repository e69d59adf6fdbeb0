"""The benchmark's metrics (defined in docs/bench.md): pass rate; faster than eager and than
torch.compile (correct and beyond the reward's margin, `reward.MARGIN`, read from the paired speedup as the reward
reads it; a failed torch.compile baseline never counts as faster); geometric-mean speedups over the
correct tasks; KernelBench's fast_p (p = 0, 1, 1.5, 2, against eager and torch.compile); the mean
milestone reward (-1 for a task without a correct solution). Per group and overall (pooled: weighted
by task count); a task's score is its best attempt, ranked as the agent ranks candidates. Broken
tasks (the reference fails), tasks not yet scored and failed ones (every attempt an infrastructure
failure, `INFRASTRUCTURE`) say nothing of the policy: counted apart, in no denominator.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cached_property

from cuda_agent.bench.store import Attempt
from cuda_agent.env.reward import decisive, is_faster_speedup

FAST_P = (0.0, 1.0, 1.5, 2.0)
INFRASTRUCTURE = ("internal_error", "episode_failed")   # our side or the endpoint's: never scored


@dataclass
class TaskScore:
    key: str
    group: str
    state: str                       # "scored" | "broken" | "pending" | "failed" (infrastructure only)
    best: Attempt | None = None
    attempts: int = 0
    unscored: Attempt | None = None  # the last attempt that ended on an infrastructure failure, if any

    @property
    def correct(self) -> bool:
        return self.best is not None and self.best.correct

    @property
    def verdict(self) -> str:
        return self.best.verdict if self.best is not None else self.state

    def speedup(self, baseline: str) -> float | None:
        """The best attempt's speedup as its reward read it (`attempt_speedup`)."""
        return attempt_speedup(self.best, baseline) if self.correct else None

    @cached_property
    def speed_of_light(self) -> dict | None:
        """The best attempt's speed of light (`EvalResult.speed_of_light`) where it is correct and held
        against a known peak, else None. Feedback: no metric reads it."""
        if not self.correct or not self.best.result:
            return None
        sol = json.loads(self.best.result).get("speed_of_light")
        return sol if sol and sol.get("fraction") is not None else None

    def faster(self, baseline: str) -> bool:
        """Beaten by the reward's margin, read from the paired speedup as the reward reads it."""
        return is_faster_speedup(self.speedup(baseline))

    @property
    def reward(self) -> float:
        if self.best is None or self.best.reward is None:
            return -1.0 if not self.correct else 1.0
        return float(self.best.reward)


def attempt_speedup(a: Attempt, baseline: str) -> float | None:
    """An attempt's speedup over "eager" or "compile" as its reward read it (`reward.decisive`: the
    paired median, or the ratio of the calls' totals where that is lower)."""
    median = a.speedup_vs_eager if baseline == "eager" else a.speedup_vs_compile
    totals = json.loads(a.result).get("speedup_totals", {}) if a.result else {}
    return decisive(median, totals.get(baseline))


def attempt_rank(a: Attempt) -> tuple:
    """Sort key of an attempt, as the agent ranks candidates (`agent.tracking.rank`)."""
    if not a.correct:
        return (0, 0, 0.0, 0.0, a.verdict != "missing")
    reward = a.reward if a.reward is not None else 1
    return (1, reward, attempt_speedup(a, "compile") or 0.0, attempt_speedup(a, "eager") or 0.0, True)


def task_scores(tasks: list[dict], attempts: list[Attempt]) -> list[TaskScore]:
    """One score per task of the run (`tasks` rows: key, grp), from its recorded attempts."""
    by_task: dict[str, list[Attempt]] = {}
    for a in attempts:
        by_task.setdefault(a.task_key, []).append(a)
    scores = []
    for t in tasks:
        recorded = by_task.get(t["key"], [])
        if not recorded:
            scores.append(TaskScore(t["key"], t["grp"], "pending"))
            continue
        mine = [a for a in recorded if a.verdict not in INFRASTRUCTURE]
        unscored = next((a for a in reversed(recorded) if a.verdict in INFRASTRUCTURE), None)
        if not mine:
            scores.append(TaskScore(t["key"], t["grp"], "failed", recorded[-1], len(recorded), unscored))
            continue
        if all(a.verdict == "out_of_memory" for a in mine):   # not scored yet: the next resume runs it
            scores.append(TaskScore(t["key"], t["grp"], "pending", mine[-1], len(mine), unscored))
            continue
        broken = any(a.verdict == "task_error" for a in mine)
        best = max(mine, key=attempt_rank)
        if broken and not best.correct:
            best = next(a for a in mine if a.verdict == "task_error")
        scores.append(TaskScore(t["key"], t["grp"], "broken" if broken and not best.correct else "scored",
                                best, len(mine), unscored))
    return scores


@dataclass
class Metrics:
    group: str
    tasks: int = 0                   # scored tasks: the denominator
    broken: int = 0
    pending: int = 0
    failed: int = 0                  # every attempt an infrastructure failure: not scored
    correct: int = 0
    pass_rate: float | None = None
    faster_eager: float | None = None
    faster_compile: float | None = None
    gm_vs_eager: float | None = None
    gm_vs_compile: float | None = None
    fast_p: dict[str, float] = field(default_factory=dict)           # vs eager (KernelBench's)
    fast_p_compile: dict[str, float] = field(default_factory=dict)
    mean_reward: float | None = None


def geometric_mean(values: list[float]) -> float | None:
    values = [v for v in values if v is not None and v > 0]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def fast_p(scores: list[TaskScore], p: float, baseline: str = "eager") -> float | None:
    if not scores:
        return None
    return sum(1 for s in scores if s.correct and (s.speedup(baseline) or 0.0) > p) / len(scores)


def p_label(p: float) -> str:
    return f"{p:g}"


def metrics(group: str, scores: list[TaskScore]) -> Metrics:
    m = Metrics(group)
    m.broken = sum(s.state == "broken" for s in scores)
    m.pending = sum(s.state == "pending" for s in scores)
    m.failed = sum(s.state == "failed" for s in scores)
    scored = [s for s in scores if s.state == "scored"]
    m.tasks = len(scored)
    if not scored:
        return m
    n = len(scored)
    m.correct = sum(s.correct for s in scored)
    m.pass_rate = m.correct / n
    m.faster_eager = sum(s.faster("eager") for s in scored) / n
    m.faster_compile = sum(s.faster("compile") for s in scored) / n
    m.gm_vs_eager = geometric_mean([s.speedup("eager") for s in scored])
    m.gm_vs_compile = geometric_mean([s.speedup("compile") for s in scored])
    m.fast_p = {p_label(p): fast_p(scored, p, "eager") for p in FAST_P}
    m.fast_p_compile = {p_label(p): fast_p(scored, p, "compile") for p in FAST_P}
    m.mean_reward = sum(s.reward for s in scored) / n
    return m


def summarize(scores: list[TaskScore]) -> list[Metrics]:
    """Metrics per group (in the order groups first appear), then "overall" over every task."""
    groups: dict[str, list[TaskScore]] = {}
    for s in scores:
        groups.setdefault(s.group, []).append(s)
    rows = [metrics(group, members) for group, members in groups.items()]
    rows.append(metrics("overall", scores))
    return rows
