"""The hack suite's twenty-first round on the CPU backend (cases_round21.py): a forward no faster than eager's made to
look faster through work put on the harness's own thread in the empty calls. A speed cheat is caught when it earns
no speed reward (rejected by one of its rules, or accepted at reward 1 at most)."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, check_honest, describe, run_case
from tests.hacks.cases_round21 import HACKS_ROUND21, HONEST_ROUND21, HOOK_ALONE, PADDED
from tests.hacks.test_round20 import assert_no_speed_reward


@pytest.mark.parametrize("case", HONEST_ROUND21, ids=lambda c: c.id)
def test_honest_solution_keeps_its_speed_reward(case, cache_dir, record, honest_results):
    result = check_honest(case, cache_dir, record, honest_results)
    assert result.reward >= 2, f"{case.what}: {describe(result)}, speedup {result.speedup_vs_eager}"


@pytest.mark.parametrize("case", [PADDED, HOOK_ALONE], ids=lambda c: c.id)
def test_the_cheats_forward_alone_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci})")
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


OPEN = pytest.mark.xfail(strict=True, reason=(
    "open: code of the solution's run on the harness's own thread in an empty call (a profile function, found past "
    "the link check) is the harness's CPU time, which measures the empty calls; the cap (2.5x the calibration's "
    "median plus 0.1 ms) still leaves 0.2-0.4 ms a call, a 1.2-2.5x speedup of a forward as slow as eager's"))


@pytest.mark.parametrize("case", [pytest.param(case, marks=OPEN) for case in HACKS_ROUND21], ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci}, "
          f"eager {result.eager_ms}, kernel {result.kernel_ms})")
    assert_no_speed_reward(case, result)
