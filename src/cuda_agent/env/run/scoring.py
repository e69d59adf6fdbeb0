"""What an evaluation's measures come to: the speedups (medians of per-call ratios, each pair of
times from one round), their 95 % intervals, the ratios of the calls' totals (a second condition of
a speed reward), the reward, and whether the reward's margin lies inside an interval that decides it.
"""

from __future__ import annotations

import math
import statistics

from cuda_agent.env import reward
from cuda_agent.env.measure.hold import call_times
from cuda_agent.env.measure.stats import median_interval
from cuda_agent.env.result import EvalResult

MIN_CALL_MS = 1e-4         # a call measured from outside, less the overhead, is never counted as free


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


def totals_ratio(rounds: list[dict], baseline: str) -> float | None:
    """The baseline's total time over the candidate's, on the calls timed on both sides."""
    pairs = [(b, k) for b, k in zip(round_times(rounds, baseline), round_times(rounds, "kernel")) if b and k]
    return sum(b for b, _ in pairs) / sum(k for _, k in pairs) if pairs else None


def paired_speedup(rounds: list[dict], baseline: str) -> float | None:
    """Median over the timed calls of baseline time / candidate time."""
    ratios = paired_ratios(rounds, baseline)
    return statistics.median(ratios) if ratios else None


def speedup_interval(rounds: list[dict], baseline: str, spread: tuple[float, float] = (0.0, 0.0)
                     ) -> tuple[float, float] | None:
    """The paired speedup's 95 % confidence interval, (low, high): the order statistics around the
    median of the per-call ratios that `stats.median_precision` measures (`stats.median_interval`);
    the median alone where too few calls give no interval; None where the baseline was not timed.
    `spread`: (less, more) ms by which the overhead taken off each candidate call may be off (the CPU's
    calls measured from outside, `measures.overhead_spread`): how far the median moves with `less` ms
    given back to each call, or `more` ms taken off, is added to each side's reach in quadrature (two
    independent errors)."""
    ratios = paired_ratios(rounds, baseline)
    if not ratios:
        return None
    median = statistics.median(ratios)
    low, high = _ratio_interval(ratios)
    if spread == (0.0, 0.0):
        return low, high
    down = median - statistics.median(paired_ratios(shifted(rounds, spread[0]), baseline))
    up = statistics.median(paired_ratios(shifted(rounds, -spread[1]), baseline)) - median
    return median - math.hypot(median - low, down), median + math.hypot(high - median, up)


def _ratio_interval(ratios: list[float]) -> tuple[float, float]:
    interval = median_interval(ratios)
    if interval is None:
        speedup = statistics.median(ratios)
        return speedup, speedup
    return interval


def shifted(rounds: list[dict], ms: float) -> list[dict]:
    """The rounds with `ms` added to each candidate call (copies; never below `MIN_CALL_MS`); the
    rounds themselves where `ms` is 0."""
    if not ms:
        return rounds
    return [{**entry, "kernel": max(entry["kernel"] + ms, MIN_CALL_MS)} if entry.get("kernel") else entry
            for entry in rounds]


def decision_open(rounds: list[dict], compile_scale: float | None = None,
                  spread: tuple[float, float] = (0.0, 0.0)) -> bool:
    """Whether the reward's margin lies inside a speedup's interval that decides the reward (its ends
    give different rewards, `reward.reward_bounds`). `compile_scale`: where torch.compile's time comes
    from the store, the speedup over it is the eager one times this (evaluation._baselines), and so
    is its interval. `spread`: as in `speedup_interval`."""
    eager = speedup_interval(rounds, "eager", spread)
    if eager is None:
        return False
    compiled = speedup_interval(rounds, "compile", spread)
    if compiled is None and compile_scale:
        compiled = (eager[0] * compile_scale, eager[1] * compile_scale)
    low, high = reward.reward_bounds(eager, compiled)
    return low != high


def time_resolved(rounds: list[dict], spread: tuple[float, float] = (0.0, 0.0)) -> bool:
    """Whether the kernel's median time is told apart from zero: its 95 % interval's low end, reached
    down further by the `more` ms the overhead taken off each call may be off (`spread`, in quadrature
    as in `speedup_interval`), stays above `MIN_CALL_MS`. A call measured from outside is mostly the
    harness's own steps where the kernel is short; on a loaded machine the empty calls' median can
    match the whole call, and a kernel time made of that subtraction would give any speedup."""
    times = [t for t in round_times(rounds, "kernel") if t is not None]
    if not times:
        return True
    median = statistics.median(times)
    low = (median_interval(times) or (median, median))[0]
    return median - math.hypot(median - low, spread[1]) > MIN_CALL_MS


def note_intervals(result: EvalResult, rounds: list[dict], spread: tuple[float, float] = (0.0, 0.0)) -> None:
    """Each paired speedup's 95 % interval (`speedup_ci`), whether the kernel's time is told apart
    from zero (`time_resolved`: else no speed reward, reward.score), and whether the reward was decided
    within the noise (`within_noise`): the margin inside an interval that decides it, after timing went
    on as far as it may (measures.calls_to_add), and the ratios of the calls' totals (`speedup_totals`,
    reward.score's second condition). `spread`: as in `speedup_interval`."""
    scale = None
    if result.baseline_source != "paired" and result.speedup_vs_compile and result.speedup_vs_eager:
        scale = result.speedup_vs_compile / result.speedup_vs_eager   # stored or re-timed (evaluation._baselines)
    intervals = {"eager": speedup_interval(rounds, "eager", spread),
                 "compile": speedup_interval(rounds, "compile", spread)}
    if intervals["compile"] is None and scale and intervals["eager"]:
        intervals["compile"] = (intervals["eager"][0] * scale, intervals["eager"][1] * scale)
    result.speedup_ci = {name: [low, high] for name, (low, high) in
                         ((n, ci) for n, ci in intervals.items() if ci) if low != high}
    totals = {"eager": totals_ratio(rounds, "eager"), "compile": totals_ratio(rounds, "compile")}
    if totals["compile"] is None and scale and totals["eager"]:
        totals["compile"] = totals["eager"] * scale
    result.speedup_totals = {name: ratio for name, ratio in totals.items() if ratio}
    result.time_resolved = time_resolved(rounds, spread)
    result.within_noise = result.correct and result.time_resolved and decision_open(rounds, scale, spread)
