"""The reward policy, stated once: the margin, the milestone and continuous rewards, and the words
every text uses for them (scoring, `explain`, the workspace's hint, the prompts, SKILL.md).

A baseline is beaten when the solution takes more than MARGIN less time, (t0 - t) / t0 > MARGIN,
read from a speedup t0 / t: in an evaluation, the median of paired per-call ratios, never a ratio of
the medians, and the ratio of the calls' totals beyond the margin too (`decisive`)."""

from __future__ import annotations

MARGIN = 0.05                 # the one place the margin is written
NEEDED = 1 / (1 - MARGIN)     # the speedup just above which the time saved exceeds MARGIN
PERCENT = f"{MARGIN:.0%}"     # the margin as every text writes it

REWARDS = (-1, 1, 2, 3)
SCALE = ("-1 wrong or not compiled, 1 correct, 2 faster than eager PyTorch, 3 faster than eager and "
         "`torch.compile`")
FASTER = f"more than {PERCENT} less time than that baseline (a speedup above {NEEDED:.3f}x)"


def saves_enough(saved: float, margin: float = MARGIN) -> bool:
    """Whether a share of the baseline's time saved, (t0 - t) / t0, beats the margin."""
    return saved > margin


def is_faster(t: float, t0: float | None, margin: float = MARGIN) -> bool:
    """`t` beats baseline `t0` when (t0 - t) / t0 > margin."""
    return t0 is not None and t0 > 0 and saves_enough((t0 - t) / t0, margin)


def is_faster_speedup(speedup: float | None, margin: float = MARGIN) -> bool:
    """A speedup (baseline time / solution time) beats its baseline: (t0 - t) / t0 > margin."""
    return speedup is not None and speedup > 0 and saves_enough(time_saved(speedup), margin)


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


def reward_bounds(vs_eager: tuple[float, float] | None, vs_compile: tuple[float, float] | None,
                  margin: float = MARGIN) -> tuple[int, int]:
    """The milestone rewards of a correct solution at the low and at the high ends of its speedups'
    intervals ((low, high), None where unknown): where they differ, the margin lies inside an
    interval that decides the reward, and the reward decided on the medians could come out the
    other way on another run."""
    low = reward_from_speedups(True, *(ci[0] if ci else None for ci in (vs_eager, vs_compile)), margin)
    high = reward_from_speedups(True, *(ci[1] if ci else None for ci in (vs_eager, vs_compile)), margin)
    return low, high


def continuous_from_speedup(correct: bool, vs_compile: float | None) -> float:
    """The continuous reward (ablations): the speedup over torch.compile for correct solutions, else 0."""
    return (vs_compile or 0.0) if correct else 0.0


def continuous_reward(correct: bool, t: float | None, t_compile: float | None) -> float:
    """`continuous_from_speedup` from times: t_compile / t for correct solutions, else 0."""
    return continuous_from_speedup(correct, t_compile / t if t and t_compile else None)


def decisive(speedup: float | None, totals: float | None) -> float | None:
    """The speedup a milestone reads: the median of the per-call ratios (one slow call, a page fault,
    does not move it), or the ratio of the calls' totals where that is lower, so a solution slow on
    a few calls in ten by choice is judged by the time it takes; a speed reward needs both beyond the
    margin."""
    return min(speedup, totals) if speedup is not None and totals else speedup


def decisive_speedup(result, baseline: str) -> float | None:
    """A result's speedup over "eager" or "compile" as its milestone reads it (`decisive`)."""
    median = result.speedup_vs_eager if baseline == "eager" else result.speedup_vs_compile
    return decisive(median, (getattr(result, "speedup_totals", None) or {}).get(baseline))


def totals_decide(speedup: float | None, totals: float | None) -> bool:
    """Whether the calls' totals, not the median, kept a speedup from beating its baseline."""
    return bool(speedup and totals) and is_faster_speedup(speedup) and not is_faster_speedup(totals)


def score(result) -> tuple[int, float]:
    """A result's (milestone, continuous) reward from its paired speedups, each no higher than the
    ratio of the calls' totals (`decisive`); a correct result without an eager speedup is judged on its
    times; a correct result whose time was not told apart from zero (`time_resolved` False: measured
    from outside, inside the harness's own noise) earns no speed milestone and no continuous reward
    above parity."""
    vs_compile = decisive_speedup(result, "compile")
    if result.correct and not getattr(result, "time_resolved", True):
        return 1, min(continuous_from_speedup(True, vs_compile), 1.0)
    if result.correct and result.speedup_vs_eager is not None:
        reward = reward_from_speedups(True, decisive_speedup(result, "eager"), vs_compile)
    else:
        reward = milestone_reward(result.correct, result.kernel_ms, result.eager_ms, result.compile_ms)
    return reward, continuous_from_speedup(result.correct, vs_compile)
