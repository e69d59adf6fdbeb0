"""The hack suite's eighteenth round on the CPU backend (cases_round18.py): a forward's arithmetic in a library the
sampler leaves alone. Each cheat must be rejected as the candidate's failure (never the harness's: phase "internal"),
and the honest controls beside them accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import check_cheat, check_honest
from tests.hacks.cases_round18 import HACKS_ROUND18, HONEST_ROUND18


@pytest.mark.parametrize("case", HONEST_ROUND18, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    check_honest(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND18, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    check_cheat(case, cache_dir, record)

