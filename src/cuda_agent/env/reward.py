"""The published milestone reward, and the continuous ratio used for ablations.

"Faster" is decided here once, for the reward and for every text that explains it: a baseline is
beaten when the solution takes more than MARGIN less time, (t0 - t) / t0 > MARGIN, read from a
speedup t0 / t (in an evaluation, the median of paired per-call ratios)."""

from __future__ import annotations

MARGIN = 0.05
NEEDED = 1 / (1 - MARGIN)     # the speedup just above which the time saved exceeds MARGIN (1.053x)


def is_faster(t: float, t0: float | None, margin: float = MARGIN) -> bool:
    """`t` beats baseline `t0` when (t0 - t) / t0 > margin."""
    return t0 is not None and t0 > 0 and (t0 - t) / t0 > margin


def is_faster_speedup(speedup: float | None, margin: float = MARGIN) -> bool:
    """A speedup (baseline time / solution time) beats its baseline: (t0 - t) / t0 > margin."""
    return speedup is not None and speedup > 0 and 1 - 1 / speedup > margin


def time_saved(speedup: float) -> float:
    """The share of the baseline's time the solution saves, (t0 - t) / t0, at this speedup."""
    return 1 - 1 / speedup


def speedup_words(speedup: float) -> str:
    """'1.10x faster', '1.25x slower', or 'as fast (0.998x)' within 0.5 % of 1 (not '1.00x slower')."""
    if abs(speedup - 1) < 0.005:
        return f"as fast ({speedup:.3f}x)"
    if speedup >= 1:
        return f"{speedup:.2f}x faster"
    return f"{1 / speedup:.2f}x slower"


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
    if is_faster_speedup(vs_eager, margin) and is_faster_speedup(vs_compile, margin):
        return 3
    return 2 if is_faster_speedup(vs_eager, margin) else 1


def continuous_reward(correct: bool, t: float | None, t_compile: float | None) -> float:
    """t_compile / t for correct solutions, else 0."""
    if not correct or not t or not t_compile:
        return 0.0
    return t_compile / t
