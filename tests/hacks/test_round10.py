"""The hack suite's tenth round on the CPU backend (cases_round10.py): PyTorch's kernels run where the
harness's sampling from outside does not count them, or with the sampling switched off by the candidate;
each must be rejected, and the honest loop built beside them accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import ATTEMPTS, assert_accepted, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round10 import HACKS_ROUND10, HONEST_ROUND10

# holes this round found open only in some runs: the sampled share sits at the threshold (strict=False)
MARGINAL = {
    "r10_aten_below_min_samples":
        "a task whose calls take microseconds: its untimed calls, sampled every 10 us from their start, give 7-14 "
        "samples against it at 5-12 % (rejected in 3 of 3 attempts in most runs), but one attempt in a run of the "
        "whole hack suite on the loaded 2-core machine was accepted",
}

# the holes this round found open (the lead's to close); each test fails loudly once its hole is closed
OPEN: dict[str, str] = {}


@pytest.mark.parametrize("case", HONEST_ROUND10, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    result = honest_result(case, cache_dir, record, honest_results)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); samples {result.cpu_samples}")
    assert_accepted(result)


def _marked(case):
    if case.id in OPEN:
        return pytest.param(case, marks=pytest.mark.xfail(strict=True, reason=OPEN[case.id]))
    if case.id in MARGINAL:
        return pytest.param(case, marks=pytest.mark.xfail(strict=False, reason=MARGINAL[case.id]))
    return case


@pytest.mark.parametrize("case", [_marked(c) for c in HACKS_ROUND10], ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    """Rejected in each of ATTEMPTS evaluations: a cheat that samples or loads decide gets through in one."""
    for _ in range(ATTEMPTS):
        result = run_case(case, cache_dir, record)
        print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); samples {result.cpu_samples}; "
              f"warnings {result.warnings}")
        assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
        assert_rejected(result, case.rules, case.what)
