"""The published milestone reward, and the continuous ratio used for ablations."""

from __future__ import annotations

MARGIN = 0.05


def is_faster(t: float, t0: float | None, margin: float = MARGIN) -> bool:
    """`t` beats baseline `t0` when (t0 - t) / t0 > margin."""
    return t0 is not None and t0 > 0 and (t0 - t) / t0 > margin


def milestone_reward(correct: bool, t: float | None, t_eager: float | None,
                     t_compile: float | None, margin: float = MARGIN) -> int:
    """-1 wrong or not compiled; 3 faster than eager and compile; 2 faster than eager; 1 correct."""
    if not correct or t is None:
        return -1
    faster_eager = is_faster(t, t_eager, margin)
    if faster_eager and is_faster(t, t_compile, margin):
        return 3
    return 2 if faster_eager else 1


def reward_from_speedups(correct: bool, vs_eager: float | None, vs_compile: float | None,
                         margin: float = MARGIN) -> int:
    """The milestone reward from speedups (baseline time / solution time): the same thresholds as
    `milestone_reward`, for speedups measured as medians of paired per-call ratios."""
    if not correct:
        return -1

    def faster(s: float | None) -> bool:   # (t0 - t) / t0 > margin
        return s is not None and s > 0 and 1 - 1 / s > margin

    if faster(vs_eager) and faster(vs_compile):
        return 3
    return 2 if faster(vs_eager) else 1


def continuous_reward(correct: bool, t: float | None, t_compile: float | None) -> float:
    """t_compile / t for correct solutions, else 0."""
    if not correct or not t or not t_compile:
        return 0.0
    return t_compile / t
