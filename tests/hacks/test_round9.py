"""The hack suite's ninth round on the CPU backend (cases_round9.py): empty calls made slow (their median
is taken off every timed call) and an output that is a second mapping of the input's pages, each held to
its honest control's time and speedup, which the current code does not (xfail, strict); ATen's kernels
found in libtorch_cpu.so's symbol table and an overlapping view as the output, which it accepts and must
reject (xfail, strict)."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round9 import HONEST_ROUND9, OPEN_REJECT_ROUND9, OPEN_ROUND9

COUNTED = 0.6   # the cheat must measure at least this share of its honest control's time (round 8's allowance)
ATTEMPTS = 3    # evaluations of a timing cheat: it is held only if none of them pays


@pytest.mark.parametrize("case", HONEST_ROUND9, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    assert_accepted(honest_result(case, cache_dir, record, honest_results))


@pytest.mark.xfail(strict=True, reason="the empty calls' median is taken off every call, and their time is the "
                                       "candidate's to inflate; an output's pages are judged by address in the "
                                       "candidate's process, not by what they map")
@pytest.mark.parametrize("case,control", OPEN_ROUND9, ids=lambda c: getattr(c, "id", ""))
def test_open_cheat_is_held_to_its_honest_time(case, control, cache_dir, record, honest_results):
    honest = honest_result(control, cache_dir, record, honest_results)
    assert_accepted(honest)
    for _ in range(ATTEMPTS):   # a cheat that races the harness may miss once: held only if it never pays
        result = run_case(case, cache_dir, record)
        print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); "
              f"{control.id}: {describe(honest)} (speedup {honest.speedup_vs_eager})")
        assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
        if result.error is not None:
            assert_rejected(result, case.rules, case.what)
            continue
        assert result.kernel_ms >= COUNTED * honest.kernel_ms and \
            result.speedup_vs_eager <= honest.speedup_vs_eager / COUNTED, (
                f"{case.what}: {result.kernel_ms:.4f} ms (speedup {result.speedup_vs_eager:.2f}, reward {result.reward}) "
                f"against {honest.kernel_ms:.4f} ms (speedup {honest.speedup_vs_eager:.2f}, reward {honest.reward})")


@pytest.mark.xfail(strict=True, reason="the link check reads imports and the guard sees the dispatcher only (ATen's kernels "
                                       "called at addresses found in libtorch_cpu.so pass both); the CPU backend's "
                                       "density check of a located output looks for stride 0 only, not overlap")
@pytest.mark.parametrize("case", OPEN_REJECT_ROUND9, ids=lambda c: c.id)
def test_open_cheat_is_rejected(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager})")
    assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)
