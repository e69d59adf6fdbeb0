"""The hack suite's twenty-fourth round on the CPU backend (cases_round24.py): a forward no faster than eager's made to
earn a speed reward through glibc's allocator tuned in the candidate's process alone or its fill turned back on in
the candidate's own empty calls, and a forward that reads the
heap's fill as the sign of a verification call and leaves rows unwritten elsewhere. A speed cheat is caught when it
earns no speed reward; the wrong one when it is rejected."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, no_speed_reward_in_some_attempt, run_case
from tests.hacks.cases_round24 import EMPTY_FILL, HEAP_TUNED, LOOP_PADDED, STALE_ROWS
from tests.hacks.test_round20 import assert_no_speed_reward


def _control_held(case, result) -> None:
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


def test_the_cheats_forward_alone_earns_no_speed_reward(cache_dir, record):
    no_speed_reward_in_some_attempt(LOOP_PADDED, cache_dir, record, _control_held)


@pytest.mark.parametrize("case", [HEAP_TUNED, EMPTY_FILL], ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    no_speed_reward_in_some_attempt(case, cache_dir, record, assert_no_speed_reward)


def test_rows_left_to_stale_values_outside_verification_are_rejected(cache_dir, record):
    result = run_case(STALE_ROWS, cache_dir, record)
    print(f"{STALE_ROWS.id}: {describe(result)}")
    assert_rejected(result, STALE_ROWS.rules, STALE_ROWS.what)
