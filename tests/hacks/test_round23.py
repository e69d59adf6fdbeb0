"""The hack suite's twenty-third round on the CPU backend (cases_round23.py): a forward no faster than eager's made to
earn a speed reward through what runs after the candidate's call on the same CPUs (timer interrupts, a lowered clock),
through the harness's steps measured apart (the twin), or through the heap's fill turned off in the candidate's process
alone. A speed cheat is caught when it earns no speed reward (rejected by one of its rules, or accepted at reward 1 at
most)."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, describe, no_speed_reward_in_some_attempt
from tests.hacks.cases_round23 import (AVX512_LICENSE, GC_OFF, LOOP_PADDED, NO_PERTURB, PADDED, QUIET_TIMERFDS,
                                      TIMERFD_DENSE, TIMERFD_INTERRUPTS, TWIN_DOWNCLOCK)
from tests.hacks.test_round20 import assert_no_speed_reward


def _control_held(case, result) -> None:
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


@pytest.mark.parametrize("case", [PADDED, QUIET_TIMERFDS, LOOP_PADDED], ids=lambda c: c.id)
def test_the_cheats_forward_alone_earns_no_speed_reward(case, cache_dir, record):
    no_speed_reward_in_some_attempt(case, cache_dir, record, _control_held)


@pytest.mark.parametrize("case", [TIMERFD_INTERRUPTS, TIMERFD_DENSE, AVX512_LICENSE, TWIN_DOWNCLOCK, GC_OFF,
                                  NO_PERTURB],
                         ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    no_speed_reward_in_some_attempt(case, cache_dir, record, assert_no_speed_reward)
