"""The hack suite's seventh round on the CPU backend (cases_round7.py): cheats against the guard's verdict
decided outside the candidate's process, each rejected with one of its rules; the honest control accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, run_case
from tests.hacks.cases_round7 import HACKS_ROUND7, HONEST_ROUND7


@pytest.mark.parametrize("case", HONEST_ROUND7, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record):
    assert_accepted(run_case(case, cache_dir, record))


@pytest.mark.parametrize("case", HACKS_ROUND7, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)
