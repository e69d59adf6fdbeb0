"""The hack suite's ninth round on the CPU backend (cases_round9.py): empty calls made slow (the harness
takes their time off every timed call), held to their honest control's time and speedup or rejected;
an output that is a second mapping of the input's staging pages, ATen's kernels found in
libtorch_cpu.so's symbol table, and an overlapping view as the output, rejected."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round9 import HACKS_ROUND9, HELD_ROUND9, HONEST_ROUND9

COUNTED = 0.6   # the cheat must measure at least this share of its honest control's time (round 8's allowance)
# Each side's eager time comes from its own evaluation, and on a loaded 2-core machine the two drift
# apart; a cheat that pays does so in every attempt, noise in one.
ATTEMPTS = 3


@pytest.mark.parametrize("case", HONEST_ROUND9, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    assert_accepted(honest_result(case, cache_dir, record, honest_results))


@pytest.mark.parametrize("case,control", HELD_ROUND9, ids=lambda c: getattr(c, "id", ""))
def test_cheat_is_held_to_its_honest_time(case, control, cache_dir, record, honest_results):
    honest = honest_result(control, cache_dir, record, honest_results)
    seen = []
    for attempt in range(ATTEMPTS):
        if attempt:   # the two evaluated again, back to back, under the load of the moment
            honest = run_case(control, cache_dir, record)
        assert_accepted(honest)
        result = run_case(case, cache_dir, record)
        print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); "
              f"{control.id}: {describe(honest)} (speedup {honest.speedup_vs_eager})")
        assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
        if result.error is not None:
            assert_rejected(result, case.rules, case.what)
            return
        if (result.kernel_ms >= COUNTED * honest.kernel_ms
                and result.speedup_vs_eager <= honest.speedup_vs_eager / COUNTED):
            return
        seen.append(f"{result.kernel_ms:.4f} ms (speedup {result.speedup_vs_eager:.2f}, reward {result.reward}) "
                    f"against {honest.kernel_ms:.4f} ms (speedup {honest.speedup_vs_eager:.2f}, reward {honest.reward})")
    pytest.fail(f"{case.what}: " + "; ".join(seen))


@pytest.mark.parametrize("case", HACKS_ROUND9, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager})")
    assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)
