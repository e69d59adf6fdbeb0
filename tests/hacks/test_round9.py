"""The hack suite's ninth round on the CPU backend (cases_round9.py): empty calls made slow (the harness
takes their time off every timed call), held to their honest control's time and speedup or rejected;
an output that is a second mapping of the input's staging pages, ATen's kernels found in
libtorch_cpu.so's symbol table, and an overlapping view as the output, rejected."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_held, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round9 import HACKS_ROUND9, HELD_ROUND9, HONEST_ROUND9


@pytest.mark.parametrize("case", HONEST_ROUND9, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    assert_accepted(honest_result(case, cache_dir, record, honest_results))


@pytest.mark.parametrize("case,control", HELD_ROUND9, ids=lambda c: getattr(c, "id", ""))
def test_cheat_is_held_to_its_honest_time(case, control, cache_dir, record, honest_results):
    assert_held(case, control, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND9, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager})")
    assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)
