"""The reward's decision and its noise: each paired speedup's 95 % interval, more timed calls while the
margin lies inside an interval that decides the reward (up to a cap), and the words when it still does
("within noise" and how the reward was decided). Rounds of timed calls are made up here, with a seeded
spread around a chosen speedup, and go through the scoring, the stop rule and the texts as an
evaluation's rounds do."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from cuda_agent.env import reward as policy
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.explain import explain_reward, noise_text, reward_line, timing_rows
from cuda_agent.env.measure.stats import median_precision
from cuda_agent.env.result import EvalResult, Timing
from cuda_agent.env.run.measures import (DECISION_CAP, calls_to_add, harness_overhead, less_overhead, overhead_spread,
                                         precise_enough)
from cuda_agent.env.run.scoring import decision_open, note_intervals, paired_ratios, paired_speedup, score, speedup_interval

CONFIG = EvalConfig(backend="cpu", iters=20)


def rounds(speedup: float, spread: float, n: int, seed: int = 0, compile_speedup: float | None = None) -> list[dict]:
    """`n` timed calls of a 1 ms kernel whose eager time (and torch.compile's) is `speedup` times its
    own, each call off by up to `spread` of it (uniform)."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        entry = {"kernel": 1.0, "eager": speedup * (1 + rng.uniform(-spread, spread))}
        if compile_speedup:
            entry["compile"] = compile_speedup * (1 + rng.uniform(-spread, spread))
        out.append(entry)
    return out


def scored(timed: list[dict]) -> EvalResult:
    """A correct result from these rounds, as evaluation._baselines and scoring.score make it."""
    r = EvalResult(task="t", backend="cpu", compiled=True, correct=True, kernel_ms=1.0,
                   eager_ms=statistics.median(e["eager"] for e in timed),
                   speedup_vs_eager=paired_speedup(timed, "eager"))
    if any("compile" in e for e in timed):
        r.compile_ms = statistics.median(e["compile"] for e in timed)
        r.speedup_vs_compile, r.baseline_source = paired_speedup(timed, "compile"), "paired"
    note_intervals(r, timed)
    score(r)
    return r


def test_the_interval_is_the_order_statistics_the_precision_measures():
    timed = rounds(1.3, 0.2, 40)
    low, high = speedup_interval(timed, "eager")
    ratios = paired_ratios(timed, "eager")
    median, half = statistics.median(ratios), median_precision(ratios)
    assert low in ratios and high in ratios and low < median < high
    assert (high - low) / 2 / median == pytest.approx(half, rel=1e-12)
    # a few wild calls reach neither end: the interval never leaves the ratios' range
    wild = timed[:34] + [{"kernel": 1.0, "eager": 50.0}] * 3 + [{"kernel": 1.0, "eager": 0.01}] * 3
    assert 0.5 < speedup_interval(wild, "eager")[0] < speedup_interval(wild, "eager")[1] < 2
    assert speedup_interval(rounds(1.3, 0.2, 4), "eager")[0] == speedup_interval(rounds(1.3, 0.2, 4), "eager")[1]
    assert speedup_interval(timed, "compile") is None   # not timed


def test_reward_bounds_differ_only_where_the_margin_decides():
    assert policy.reward_bounds((1.01, 1.08), None) == (1, 2)
    assert policy.reward_bounds((1.2, 1.5), (1.01, 1.08)) == (2, 3)
    assert policy.reward_bounds((0.8, 0.9), (1.01, 1.08)) == (1, 1)   # eager decides: compile's noise does not
    assert policy.reward_bounds((1.2, 1.5), (1.2, 1.3)) == (3, 3)


def test_a_clear_decision_adds_no_calls_and_a_near_one_adds_up_to_the_cap():
    clear = rounds(2.0, 0.05, 20)
    assert not decision_open(clear) and calls_to_add(CONFIG, clear, 20, 20) == 0
    near = rounds(1.05, 0.10, 20)
    assert decision_open(near)
    assert calls_to_add(CONFIG, near, 20, 20) == 10               # half of iters at a time
    assert calls_to_add(CONFIG, near, 55, 20) == 5                # up to DECISION_CAP * iters in all
    assert calls_to_add(CONFIG, near, DECISION_CAP * 20, 20) == 0
    assert calls_to_add(CONFIG, near, 20, 20, budget=24) == 4     # slow calls: the budget's count
    for config in (EvalConfig(backend="cpu", iters=20, precision=None), EvalConfig(backend="cpu", baselines=False)):
        assert calls_to_add(config, near, 20, 20) == 0
    # compile from the store: its speedup is eager's times the stored ratio, and so is its interval
    eager_clear = rounds(1.5, 0.05, 20)
    assert not decision_open(eager_clear) and decision_open(eager_clear, compile_scale=1.05 / 1.5)


def test_the_overhead_taken_off_is_the_twins_and_the_candidates_empty_calls_only_lower_it():
    """What is taken off each CPU call is the median empty call of the candidate's twin (run/twin.py), which no
    solution reaches: the candidate's own empty calls, however slow its code makes them, take no more off; faster
    ones take less off (up to their median's interval's high end). Without any of the twin's, nothing is taken off."""
    twin = [0.30, 0.31, 0.29, 0.35, 0.30, 0.28, 0.33, 0.30, 0.32, 0.31, 0.29, 0.30]
    slowed = [3.0 + 0.01 * i for i in range(12)]   # a hook spinning 3 ms in the candidate's empty calls
    assert harness_overhead(twin, slowed) == statistics.median(twin)
    assert harness_overhead(twin, [0.1] * 12) == 0.1
    assert harness_overhead([], slowed) == 0.0
    # an honest candidate's empty calls, a little cheaper than the twin's: the twin's median stands
    honest = [wall - 0.02 for wall in twin]
    assert harness_overhead(twin, honest) == statistics.median(twin)
    rounds = [{"kernel": 1.0} for _ in range(5)]
    less_overhead(rounds, twin, slowed)
    assert all(entry["kernel"] == pytest.approx(1.0 - statistics.median(twin)) for entry in rounds)


def test_the_overhead_taken_off_calls_measured_from_outside_is_in_the_interval():
    """The CPU's calls less the twin's empty calls' median: that median's own interval widens the speedup's,
    so a decision confident on the calls alone is open when the overhead is known too loosely."""
    nulls = [0.20, 0.21, 0.22, 0.23, 0.24, 0.25, 0.26, 0.27, 0.28, 0.30, 0.40, 0.45]
    less, more = overhead_spread(nulls)
    overhead = harness_overhead(nulls)
    assert 0 < less < overhead and 0 < more and overhead - less in nulls and overhead + more in nulls
    # bounded as the overhead is: the candidate's own empty calls lower it, never raise it
    bounded = overhead_spread(nulls, [0.05] * 12)
    assert harness_overhead(nulls, [0.05] * 12) + bounded[1] <= 0.05 + 1e-12
    assert overhead_spread(nulls, [5.0] * 12) == (less, more)
    assert overhead_spread([]) == (0.0, 0.0)
    assert overhead_spread([0.3, 0.2, 0.4]) == pytest.approx((0.1, 0.1))   # too few for an interval: their range

    # a 1 ms kernel 1.10x faster than eager, its calls steady: confident alone, open with the overhead's spread
    timed = [{"kernel": 1.0, "eager": 1.10 * (1 + 0.004 * (-1) ** i)} for i in range(40)]
    assert not decision_open(timed)
    wide = speedup_interval(timed, "eager", (0.06, 0.02))
    alone = speedup_interval(timed, "eager")
    assert wide[0] < policy.NEEDED < alone[0] < alone[1] < wide[1]
    # each side's reach: the calls' own and the overhead's, in quadrature
    median = paired_speedup(timed, "eager")
    down, up = median - median / 1.06, median / 0.98 - median
    assert median - wide[0] == pytest.approx(math.hypot(median - alone[0], down), rel=1e-9)
    assert wide[1] - median == pytest.approx(math.hypot(alone[1] - median, up), rel=1e-9)
    assert decision_open(timed, spread=(0.06, 0.0)) and not decision_open(timed, spread=(0.0, 0.06))
    assert calls_to_add(CONFIG, timed, 20, 20, spread=(0.06, 0.0)) == 10
    r = EvalResult(task="t", backend="cpu", compiled=True, correct=True, kernel_ms=1.0, eager_ms=1.1,
                   speedup_vs_eager=paired_speedup(timed, "eager"))
    note_intervals(r, timed, (0.06, 0.0))
    score(r)
    assert r.within_noise and r.speedup_ci["eager"][0] < policy.NEEDED and r.reward == 2   # decided on the median
    assert "within noise" in explain_reward(r)


def test_an_empty_call_on_the_cpu_is_followed_by_a_warm_up():
    """Where calls are measured from outside, the call after an empty one is not timed (`empty_calls`)."""
    from cuda_agent.env.run.schedule import timing_calls

    for settle in (False, True):
        calls = timing_calls(3, 40, True, 12, random.Random(1), settle_nulls=settle)
        kinds = [c.kind for c in calls]
        assert kinds.count("null") == 12 and kinds.count("timed") >= 40 and kinds.count("spot") == 2
        after = [kinds[i + 1] if i + 1 < len(kinds) else None for i, k in enumerate(kinds) if k == "null"]
        assert all(k == "warmup" for k in after) == settle
        leading = next(i for i, k in enumerate(kinds) if k != "warmup")
        assert 3 <= leading <= 6 and kinds.count("warmup") == leading + (12 if settle else 0)


class _Pipe:
    def pending(self) -> int:
        return 0

    def drain(self) -> None:
        pass


def test_timing_does_not_stop_early_while_the_decision_is_open():
    config = EvalConfig(backend="cpu", iters=100, min_iters=10, precision=0.02)
    measured = [(1.0, None)] * 40   # the kernel itself is known exactly
    assert precise_enough(config, rounds(1.3, 0.005, 40), measured, _Pipe())
    near = [{"kernel": 1.0, "eager": policy.NEEDED * (1 + 0.005 * (-1) ** i)} for i in range(40)]
    assert speedup_interval(near, "eager")[0] < policy.NEEDED < speedup_interval(near, "eager")[1]
    assert not precise_enough(config, near, measured, _Pipe())


def test_a_reward_decided_within_the_noise_says_so_once_with_its_interval():
    near = scored(rounds(1.05, 0.10, 60, seed=3))
    assert near.within_noise and near.speedup_ci["eager"][0] < policy.NEEDED < near.speedup_ci["eager"][1]
    assert near.reward == policy.reward_from_speedups(True, near.speedup_vs_eager, None)   # the median decides
    said = noise_text(near)
    assert said.startswith(f"within noise: speedup vs eager {near.speedup_vs_eager:.3f}x, 95 % CI ")
    near.timings["kernel"] = Timing.from_samples([1.0] * 60)
    said = noise_text(near)
    assert said.startswith("within noise after 60 timed calls: speedup vs eager ")
    assert f"includes the {policy.NEEDED:.3f}x margin: the reward was decided on the median" in said
    assert said in reward_line(near) and said in explain_reward(near)
    assert reward_line(near).startswith(f"  reward {near.reward:g} ")
    eager_row = {row.label: row for row in timing_rows(near)}["eager"]
    assert eager_row.verdict.endswith(", within noise") and eager_row.interval.endswith("x")

    clear = scored(rounds(2.0, 0.10, 20, compile_speedup=1.5))
    assert not clear.within_noise and noise_text(clear) is None and clear.reward == 3
    assert "noise" not in reward_line(clear) and "noise" not in explain_reward(clear)
    assert set(clear.speedup_ci) == {"eager", "compile"}
    # eager clearly not beaten: torch.compile's interval holding the margin decides nothing
    slow = scored(rounds(0.8, 0.02, 20, compile_speedup=1.05))
    assert slow.reward == 1 and not slow.within_noise


def test_the_workspace_profile_shows_each_interval():
    from cuda_agent.agent.workspace import format_result

    near = scored(rounds(1.05, 0.10, 60, seed=3))
    text = format_result("profile", near)
    low, high = near.speedup_ci["eager"]
    assert f"; speedup 95 % CI {low:.2f}-{high:.2f}x)" in text
    assert text.count("within noise") == 1 and f"reward {near.reward:g}" in text


def test_a_kernel_time_made_of_the_overhead_subtraction_earns_no_speed_reward():
    """On a loaded CPU machine the empty calls' median can match a short forward's whole call: less that
    overhead, most calls fall to the floor and any speedup follows. A time whose interval reaches zero
    decides no speed reward; one told apart from zero is scored as before."""
    from cuda_agent.env.run.measures import less_overhead
    from cuda_agent.env.run.scoring import time_resolved

    rng = random.Random(5)
    nulls = [1.5 + rng.uniform(-0.15, 0.25) for _ in range(12)]   # the harness's own steps, under load

    def measured(kernel_ms: float, eager_ms: float) -> EvalResult:
        timed = [{"kernel": 1.5 + kernel_ms + rng.uniform(-0.15, 0.15), "eager": eager_ms * (1 + rng.uniform(-0.02, 0.02))}
                 for _ in range(40)]
        less_overhead(timed, nulls)
        kernel = statistics.median(e["kernel"] for e in timed)
        r = EvalResult(task="t", backend="cpu", compiled=True, correct=True, kernel_ms=kernel,
                       eager_ms=statistics.median(e["eager"] for e in timed),
                       speedup_vs_eager=paired_speedup(timed, "eager"))
        note_intervals(r, timed, overhead_spread(nulls))
        score(r)
        return r

    short = measured(0.01, 0.02)   # a 10 µs forward against a 20 µs eager, inside the overhead's noise
    assert policy.reward_from_speedups(True, short.speedup_vs_eager, None) == 2   # what the median alone gives
    assert not short.time_resolved and short.reward == 1 and short.reward_continuous <= 1.0
    assert not short.within_noise
    assert "not told apart from zero" in explain_reward(short)
    assert {row.label: row for row in timing_rows(short)}["eager"].verdict == "not decided (time unresolved)"
    from cuda_agent.env.explain import reward_hint

    assert reward_hint(short).startswith("  target not decided: ")

    long = measured(2.0, 4.0)   # 2 ms against 4 ms: well outside the overhead's noise
    assert long.time_resolved and long.reward == 2 and "told apart" not in explain_reward(long)
    # on the GPU (no overhead taken off) any timed kernel is resolved; a handful of floor values is not
    assert time_resolved([{"kernel": 0.003}] * 20)
    assert not time_resolved([{"kernel": 1e-4}] * 20)
    assert EvalResult.from_dict(short.to_dict()).time_resolved is False


def test_a_speed_reward_needs_the_calls_totals_beyond_the_margin_too():
    """Slow on three calls in ten by choice: the median of the per-call ratios sits among the fast
    calls, the totals show the slow ones and decide; an honest kernel's one slow call in forty moves
    nothing."""
    from cuda_agent.env.explain import timing_rows
    from cuda_agent.env.run.scoring import totals_ratio

    blind = [{"kernel": 1.0 * (12 if i % 10 in (2, 5, 8) else 1), "eager": 1.5} for i in range(40)]
    r = scored(blind)
    assert r.speedup_vs_eager == pytest.approx(1.5) and policy.is_faster_speedup(r.speedup_vs_eager)
    assert r.speedup_totals["eager"] == pytest.approx(totals_ratio(blind, "eager"))
    assert r.speedup_totals["eager"] == pytest.approx(1.5 * 40 / (28 + 12 * 12)) and r.speedup_totals["eager"] < 1
    assert r.reward == 1
    verdict = {row.label: row for row in timing_rows(r)}["eager"].verdict
    assert verdict.startswith("no: the calls' total time is only") and "total time" in explain_reward(r)

    honest = rounds(1.5, 0.05, 40, compile_speedup=1.3)
    honest[7]["kernel"] = 3.0   # a page fault
    h = scored(honest)
    assert 1.3 < h.speedup_totals["eager"] < h.speedup_vs_eager and h.reward == 3
    assert h.reward_continuous == pytest.approx(min(h.speedup_vs_compile, h.speedup_totals["compile"]))
