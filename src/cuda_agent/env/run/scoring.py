"""What an evaluation's measures come to: the speedups (medians of per-call ratios, each pair of
times from one round), the reward, and a warning where the reward was decided within the noise.
"""

from __future__ import annotations

import statistics

from cuda_agent.env import reward
from cuda_agent.env.measure.hold import call_times
from cuda_agent.env.measure.stats import median_precision
from cuda_agent.env.result import EvalResult


def score(result: EvalResult, partial: bool = False) -> None:
    """Sets the result's reward: None for a broken task, none earned by a compile- or verify-only run,
    else from the paired speedups (or from the times alone where there are none)."""
    if result.task_error:
        result.reward = None
        return
    if partial:  # a compile- or verify-only run earns no milestone; failures still score -1
        result.reward = None if result.error is None else -1
        return
    if result.correct and result.kernel_ms:
        # the profile phase sets paired speedups (medians of per-call ratios); times alone otherwise
        if result.eager_ms and result.speedup_vs_eager is None:
            result.speedup_vs_eager = result.eager_ms / result.kernel_ms
        if result.compile_ms and result.speedup_vs_compile is None:
            result.speedup_vs_compile = result.compile_ms / result.kernel_ms
    result.reward, result.reward_continuous = reward.score(result)


def side_measures(rounds: list[dict], side: str) -> tuple[list, list]:
    """One side's ("kernel", "eager" or "compile") device and host times, round by round (None where
    the round has none)."""
    return [r.get(side) for r in rounds], [r.get(f"{side}_host") for r in rounds]


def round_times(rounds: list[dict], side: str) -> list[float | None]:
    """One side's time in each round, its device and host measures weighed by hold.call_times."""
    return call_times(*side_measures(rounds, side))


def paired_ratios(rounds: list[dict], baseline: str) -> list[float]:
    """Baseline time / candidate time, round by round (each pair from one round)."""
    pairs = zip(round_times(rounds, baseline), round_times(rounds, "kernel"))
    return [b / k for b, k in pairs if b and k]


def paired_speedup(rounds: list[dict], baseline: str) -> float | None:
    """Median over the timed calls of baseline time / candidate time."""
    ratios = paired_ratios(rounds, baseline)
    return statistics.median(ratios) if ratios else None


def note_noise(result: EvalResult, rounds: list[dict]) -> None:
    """A warning where a paired speedup's 95 % interval holds the reward's margin: the milestone
    it decides could have come out the other way on another run."""
    for baseline, name in (("eager", "eager"), ("compile", "torch.compile")):
        ratios = paired_ratios(rounds, baseline)
        if len(ratios) < 6:
            continue
        speedup, half = statistics.median(ratios), median_precision(ratios)
        low, high = speedup * (1 - half), speedup * (1 + half)
        if low < reward.NEEDED < high:
            result.warnings.append(
                f"noise: the speedup vs {name} ({speedup:.3f}x, 95 % interval {low:.3f}-{high:.3f}x) holds the "
                f"{reward.PERCENT} margin ({reward.NEEDED:.3f}x): the reward was decided within the noise")
