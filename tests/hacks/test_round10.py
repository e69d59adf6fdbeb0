"""The hack suite's tenth round on the CPU backend (cases_round10.py): PyTorch's kernels run where the
harness's sampling from outside does not count them, or with the sampling switched off by the candidate;
each must be rejected, and the honest loop built beside them accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import ATTEMPTS, assert_accepted, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round10 import HACKS_ROUND10, HONEST_ROUND10

# holes this round found open only in some runs: the sampled share sits at the threshold (strict=False)
MARGINAL = {
    "r10_conv_in_jit_code":
        "oneDNN's kernels run from anonymous executable memory (52 % of the sampled time, over 95 % of the "
        "convolution's); only its driver loop and per-call set-up in dnnl:: are counted, 2.0-3 % of the sampled "
        "time: accepted in some runs (reward 1: 6.08 ms, speedup 1.03), rejected at the 2 % threshold in others",
}

# the holes this round found open (the lead's to close); each test fails loudly once its hole is closed
OPEN = {
    "r10_aten_diluted_by_verification":
        "op_samples judges ATen's share of the sampled time over all calls so far: the untimed verification calls, "
        "which the schedule puts first, fill it with the binding's own spinning (4 s), and ATen's samples in every "
        "later call stay under 2 % of it (accepted, reward 2: 0.7 % share, 1.22 ms, speedup 1.58)",
    "r10_aten_below_min_samples":
        "a task whose calls take a few microseconds leaves fewer than MIN_SAMPLES ATen samples in the whole "
        "evaluation (100 us between samples in untimed calls, 1 ms in timed ones), whatever their share "
        "(accepted, reward 1, 0.045 ms)",
    "r10_aten_code_moved_to_anonymous_memory":
        "samples are attributed through /proc/PID/maps to the file behind the mapping: libtorch_cpu.so's code, "
        "copied into anonymous executable memory (mmap with PROT_EXEC, no mprotect) and moved over the original "
        "(mremap MREMAP_FIXED), runs unchanged and its samples are '[anonymous]', '?' once a sample in the "
        "solution's own library makes the harness read the maps again (accepted, reward 1-2 in 4 of 4 runs: "
        "1.03-1.77 ms, speedup 0.99-1.50, 15-25 % of the sampled time in [anonymous])",
    "r10_aten_on_threads_younger_than_a_period":
        "the sampling period counts each thread's CPU time and an inherited perf event starts a full period: "
        "ATen's work split over std::threads that each end within one period is never sampled (accepted, "
        "reward 2 in 5 of 6 runs: 1.18-1.91 ms, speedup 1.14-1.56, under 1 % of the sampled time in ATen)",
}


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
