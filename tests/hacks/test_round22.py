"""The hack suite's twenty-second round on the CPU backend (cases_round22.py): a forward no faster than eager's made to
earn a speed reward through the reward's statistic (the median of per-call ratios) or through the baseline's caches
emptied in time no clock measures. A speed cheat is caught when it earns no speed reward (rejected by one of its
rules, or accepted at reward 1 at most)."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, check_honest_speed, describe, run_case
from tests.hacks.cases_round22 import (ALL_SLOW, EVICT_BEFORE_EAGER, EVICT_BY_HOOK, EVICT_OTHERS, HONEST_ROUND22,
                                      INTERPRETER_ALONE, INTERPRETER_BASELINE, INTERRUPTS, LEAN_REAL_CALLS,
                                      MEDIAN_BLIND, OWN_PADDED, PADDED, QUIET_TIMERS, TWIN_COLD)
from tests.hacks.test_round20 import assert_no_speed_reward


@pytest.mark.parametrize("case", HONEST_ROUND22, ids=lambda c: c.id)
def test_honest_solution_keeps_its_speed_reward(case, cache_dir, record, honest_results):
    check_honest_speed(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", [PADDED, ALL_SLOW, OWN_PADDED, QUIET_TIMERS], ids=lambda c: c.id)
def test_the_cheats_forward_alone_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci})")
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


def test_median_cheat_earns_no_speed_reward(cache_dir, record):
    """A speed reward needs the ratio of the calls' totals beyond the margin too (reward.decisive)."""
    result = run_case(MEDIAN_BLIND, cache_dir, record)
    kernel, eager = result.timings.get("kernel"), result.timings.get("eager")
    print(f"{MEDIAN_BLIND.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci}; mean "
          f"call {kernel and kernel.mean_ms} ms against eager's {eager and eager.mean_ms} ms)")
    assert_no_speed_reward(MEDIAN_BLIND, result)
    assert result.error is not None or result.speedup_totals["eager"] < 1   # the slow calls show in the totals


@pytest.mark.parametrize("case", [EVICT_BEFORE_EAGER, EVICT_OTHERS, EVICT_BY_HOOK, INTERRUPTS, LEAN_REAL_CALLS, TWIN_COLD],
                         ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci}, "
          f"eager {result.eager_ms}, kernel {result.kernel_ms})")
    assert_no_speed_reward(case, result)


def test_interpreter_forward_is_refused(cache_dir, record):
    result = run_case(INTERPRETER_ALONE, cache_dir, record)
    print(f"{INTERPRETER_ALONE.id}: {describe(result)}")
    assert_rejected(result, INTERPRETER_ALONE.rules, INTERPRETER_ALONE.what)


def test_interpreter_forward_with_its_baseline_raised_is_refused(cache_dir, record):
    """The sampler's baseline is the twin's empty calls (op_samples.null_interpreter), where no solution runs."""
    result = run_case(INTERPRETER_BASELINE, cache_dir, record)
    print(f"{INTERPRETER_BASELINE.id}: {describe(result)}; samples {result.cpu_samples}")
    assert_rejected(result, INTERPRETER_BASELINE.rules, INTERPRETER_BASELINE.what)
