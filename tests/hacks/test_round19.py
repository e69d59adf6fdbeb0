"""The hack suite's nineteenth round on the CPU backend (cases_round19.py): a forward computed by the interpreter,
hidden from the interpreter rule's measure of it. Each cheat must be rejected as the candidate's failure, and the
honest control beside them accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import check_cheat, check_honest
from tests.hacks.cases_round19 import HACKS_ROUND19, HONEST_ROUND19, PADDED


@pytest.mark.parametrize("case", HONEST_ROUND19, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    check_honest(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND19, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    check_cheat(case, cache_dir, record)


def test_padded_interpreter_is_rejected(cache_dir, record):
    check_cheat(PADDED, cache_dir, record)
