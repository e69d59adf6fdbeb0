"""The hack suite's nineteenth round on the CPU backend (cases_round19.py): a forward computed by the interpreter,
hidden from the interpreter rule's measure of it. Each cheat must be rejected as the candidate's failure, and the
honest control beside them accepted; the padded forwards stay open (docs/verification.md "What remains open")."""

from __future__ import annotations

import pytest

from tests.hacks.cases import check_cheat, check_honest
from tests.hacks.cases_round19 import HACKS_ROUND19, HONEST_ROUND19, PADDED

# what the verdict must name, where the rule alone would not show that the fix is what caught it
NAMED = {"r19_short_threads": "on threads that ended unsampled"}


@pytest.mark.parametrize("case", HONEST_ROUND19, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    check_honest(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND19, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    check_cheat(case, cache_dir, record, NAMED.get(case.id))


@pytest.mark.xfail(strict=True, reason="judged by amount, not place: a forward whose interpreter time is padded with "
                                       "four times as much of its own native code's passes, correct and slow "
                                       "(reward 1, as any slow honest kernel)")
@pytest.mark.parametrize("case", PADDED, ids=lambda c: c.id)
def test_padded_interpreter_is_rejected(case, cache_dir, record):
    check_cheat(case, cache_dir, record)
