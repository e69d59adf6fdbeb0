"""The hack suite's twenty-first round on the CPU backend (cases_round21.py): a forward no faster than eager's made to
look faster through work put on the harness's own thread in the empty calls. A speed cheat is caught when it earns
no speed reward (rejected by one of its rules, or accepted at reward 1 at most)."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, check_honest_speed, describe, run_case
from tests.hacks.cases_round21 import HACKS_ROUND21, HONEST_ROUND21, HOOK_ALONE, PADDED
from tests.hacks.test_round20 import assert_no_speed_reward


@pytest.mark.parametrize("case", HONEST_ROUND21, ids=lambda c: c.id)
def test_honest_solution_keeps_its_speed_reward(case, cache_dir, record, honest_results):
    check_honest_speed(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", [PADDED, HOOK_ALONE], ids=lambda c: c.id)
def test_the_cheats_forward_alone_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci})")
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


@pytest.mark.parametrize("case", HACKS_ROUND21, ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci}, "
          f"eager {result.eager_ms}, kernel {result.kernel_ms})")
    assert_no_speed_reward(case, result)
