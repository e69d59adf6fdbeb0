"""The hack suite's twenty-fifth round on the CPU backend (cases_round25.py): a forward no faster than eager's made to
earn a speed reward through what its padding leaves behind for eager's timed run and the twin's empty calls (what is
taken off each call: caches full of its dirty lines, a core clocked down by AVX-512), its own empty calls raised so
that their bound never caps the twin's, or the interpreter's garbage collector switched off in its process alone
(the harness's steps in its calls cheaper than in the twin's). A speed cheat is caught when it earns no speed
reward."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, describe, no_speed_reward_in_some_attempt
from tests.hacks.cases_round25 import EVICTING_PADDING, GC_OFF, LOOP_PADDED, RAISED_BOUND, WIDE_PADDING
from tests.hacks.test_round20 import assert_no_speed_reward


def _figures(result) -> None:
    """The totals' ratio and each side's calls, printed for the report (-s)."""
    timings = {name: (round(t.median_ms, 3), round(t.mean_ms, 3)) for name, t in result.timings.items()}
    print(f"  totals {result.speedup_totals}, (median, mean) ms {timings}")


def _control_held(case, result) -> None:
    _figures(result)
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


def test_the_cheats_forward_alone_earns_no_speed_reward(cache_dir, record):
    no_speed_reward_in_some_attempt(LOOP_PADDED, cache_dir, record, _control_held)


@pytest.mark.parametrize("case", [EVICTING_PADDING, RAISED_BOUND, GC_OFF, WIDE_PADDING], ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    no_speed_reward_in_some_attempt(case, cache_dir, record, _cheat_held)


def _cheat_held(case, result) -> None:
    _figures(result)
    assert_no_speed_reward(case, result)
