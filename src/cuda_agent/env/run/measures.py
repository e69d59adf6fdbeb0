"""What the timed calls' measures say while timing runs and once it is over: whether the times are
known well enough to stop (the precision rule), how many calls to add while the reward's margin lies
inside a speedup's interval that decides it (the decision rule), the harness's own overhead taken off the calls
measured from outside, and the clock check (the candidate's reported times against the harness's).
"""

from __future__ import annotations

import statistics

from cuda_agent.env.config import EvalConfig
from cuda_agent.env.measure.hold import call_times, floor_precise
from cuda_agent.env.measure.stats import median_interval, median_precision
from cuda_agent.env.rules import registry as rules
from cuda_agent.env.run.judge_pipe import JudgePipe
from cuda_agent.env.run.schedule import JUDGE_BATCH
from cuda_agent.env.run.scoring import MIN_CALL_MS, decision_open, paired_ratios, round_times, side_measures
from cuda_agent.env.run.worker_run import Failed

CLOCK_ALLOWANCE_MS = 3.0   # per call: what the harness's own work may differ between empty and real calls
DECISION_CAP = 3           # timing goes on for an open decision up to this many times `iters` timed calls


def precise_enough(config: EvalConfig, rounds: list[dict], measured: list[tuple], pipe: JudgePipe,
                   compile_scale: float | None = None, spread: tuple[float, float] = (0.0, 0.0)) -> bool:
    """Whether the kernel's median time (`measured`: every timed call so far, its device and host
    times), its host floor where that decides (hold.floor_precise) and its median paired speedups
    (the calls judged so far) are all known to within `precision` (`stats`), and the reward's
    decision is not open (`scoring.decision_open`; `compile_scale` and `spread` as there). The calls left are
    then dropped: at most `iters` are timed (more while the decision is open: `calls_to_add`), at
    least `min_iters`. The judge's verdicts trail the candidate by a batch or two: when the kernel is
    known well enough and a batch's worth of calls awaits the judge, they are judged first."""
    precision = config.precision
    if precision is None or len(measured) < config.min_iters:
        return False
    devices, hosts = zip(*measured)
    if median_precision(call_times(devices, hosts)) > precision or not floor_precise(devices, hosts, precision):
        return False
    if config.baselines and pipe.pending() >= JUDGE_BATCH:
        pipe.drain()
    return not config.baselines or (speedups_precise(rounds, precision)
                                    and not decision_open(rounds, compile_scale, spread))


def calls_to_add(config: EvalConfig, rounds: list[dict], timed: int, iters: int, budget: int | None = None,
                 compile_scale: float | None = None, spread: tuple[float, float] = (0.0, 0.0)) -> int:
    """Timed calls to add once the schedule's are done (all judged): while the reward's margin lies
    inside a speedup's interval that decides it, half of `iters` more (at least a judge batch), up to
    DECISION_CAP times `iters` timed calls in all (or `budget`, where slow calls cut the schedule);
    none when the decision is confident, without baselines, or where `precision` is None (every call
    of the schedule is timed, no more)."""
    cap = DECISION_CAP * iters if budget is None else min(budget, DECISION_CAP * iters)
    if config.precision is None or not config.baselines or timed >= cap:
        return 0
    if not decision_open(rounds, compile_scale, spread):
        return 0
    return min(max(JUDGE_BATCH, iters // 2), cap - timed)


def as_scored(rounds: list[dict], twin_walls: list[float], null_walls: list[float], outside: bool) -> list[dict]:
    """The rounds as the result will read them: calls measured from outside less the harness's own
    overhead (`less_overhead`, on copies), so the decisions while timing runs are the result's."""
    if not outside:
        return rounds
    copies = [dict(entry) for entry in rounds]
    less_overhead(copies, twin_walls, null_walls)
    return copies


def speedups_precise(rounds: list[dict], precision: float) -> bool:
    for baseline in ("eager", "compile"):
        ratios = paired_ratios(rounds, baseline)
        if ratios and not floor_precise(*side_measures(rounds, baseline), precision):
            return False
        if (ratios or baseline == "eager") and median_precision(ratios) > precision:   # inf for a handful
            return False
    return True


def harness_overhead(twin_walls: list[float], null_walls: list[float] | tuple = ()) -> float:
    """The harness's own steps in a call (reading the command, viewing the inputs, answering): the median
    empty call of the candidate's twin (twin.py), a process no solution reaches; at most `overhead_bound`,
    the candidate's own empty calls' upper reach, which its solution can raise (changing nothing) or lower
    (less is taken off its own calls). 0 without any of the twin's."""
    if not twin_walls:
        return 0.0
    overhead, bound = statistics.median(twin_walls), overhead_bound(null_walls)
    return overhead if bound is None else min(overhead, bound)


def overhead_bound(null_walls: list[float] | tuple) -> float | None:
    """The most taken off a call: the high end of the 95 % interval of the candidate's own empty calls' median
    (their largest where too few give none), or None without any. An upper check on the twin: what the twin
    cannot copy of the candidate's state (its heap, its caches) does not take more off than the candidate's
    own empty calls could have cost, and honest twins' and candidates' medians, which agree within their
    noise, leave the twin's whole."""
    if not null_walls:
        return None
    return (median_interval(null_walls) or (min(null_walls), max(null_walls)))[1]


def overhead_spread(twin_walls: list[float], null_walls: list[float] | tuple = ()) -> tuple[float, float]:
    """How far the overhead `harness_overhead` takes off each call may be off, (less, more) ms: to the
    ends of the twin's empty calls' median's 95 % interval (`stats.median_interval`; all of them where
    too few give none), each under the same bound. The speedups' intervals hold it
    (`scoring.speedup_interval`): one evaluation's dozen empty calls pin their median down to a few
    tenths of a millisecond, as much as a small CPU kernel's margin."""
    if not twin_walls:
        return 0.0, 0.0
    ends = median_interval(twin_walls) or (min(twin_walls), max(twin_walls))
    bound = overhead_bound(null_walls)
    low, high = (end if bound is None else min(end, bound) for end in ends)
    overhead = harness_overhead(twin_walls, null_walls)
    return max(0.0, overhead - low), max(0.0, high - overhead)


def less_overhead(rounds: list[dict], twin_walls: list[float], null_walls: list[float] | tuple = ()) -> None:
    """CPU calls measured from outside include the harness's own steps in the candidate's process:
    `harness_overhead`, taken off each."""
    overhead = harness_overhead(twin_walls, null_walls)
    for entry in rounds:
        entry["kernel"] = max(entry["kernel"] - overhead, MIN_CALL_MS)


def check_clock(config: EvalConfig, outside: bool, rounds: list[dict], null_walls: list[float]) -> None:
    """The candidate reports its own call times, and its process could have rewritten its clock.
    The harness's own measure of a call (`_outside_clock`), less its own overhead (the median empty
    call), must account for what was reported, up to the noise of that overhead: a kernel well above
    the noise that claims less than half of it is rejected. Medians, so outliers do not decide.
    The allowance (at least `CLOCK_ALLOWANCE_MS`) covers what a real call does and an empty one does
    not (the extension's allocations and launches, the guard's bookkeeping, the output checks); the
    inputs are drawn before the harness's clock starts (`prepare`), so the draw is not in it. Forged
    clocks are caught on kernels of several milliseconds; below that, the link and static checks
    stand before a forged timer."""
    if outside or not config.clock_check or len(null_walls) < 3 or not rounds:
        return   # outside: the harness's measure is the time itself
    overhead = statistics.median(null_walls)
    noise = statistics.median(abs(w - overhead) for w in null_walls)
    allowance = max(CLOCK_ALLOWANCE_MS, 4 * noise)
    implied = statistics.median(r["wall"] for r in rounds) - overhead
    reported = statistics.median(round_times(rounds, "kernel"))
    if implied - reported > allowance and reported < 0.5 * (implied - allowance):
        raise Failed("profile", f"a timed call took {implied:.2f} ms by the harness's measure (less its own "
                                 f"overhead) but the solution's process measured {reported:.2f} ms: its clock "
                                 "disagrees with the harness's", rule=rules.CLOCK_DISAGREEMENT)
