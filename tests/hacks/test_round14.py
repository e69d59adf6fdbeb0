"""The hack suite's fourteenth round on the CPU backend (cases_round14.py): the Python allowlist walked around
(a dataclass compiling injected code, functools.wraps copying special attributes, class patterns reading
them, numpy outside forward or through getattr), work done in Python beside a decoy kernel, PyTorch's own
operator namespaces counted as the solution's, ATen's code run from a memory file named like a path or
from shared memory, the sampler's counters switched off from inside, and outputs the harness might fail to
read. Each cheat must be rejected as the candidate's failure (never the harness's: phase "internal"), and
the honest controls beside them accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round14 import HACKS_ROUND14, HONEST_ROUND14

# what the verdict must name, where the rule alone would not show that the fix is what caught it
NAMED = {
    "r14_pytorch_namespace_from_cpp": "mkl::_mkl_linear",   # the guard's verdict, before the sampler's
    "r14_aten_code_in_a_memfd_named_like_a_path": "[no file]",
    "r14_numpy_from_cpp": "[numpy]",
    "r14_number_from_python_items": "into Python",
    "r14_dataclass_compiles_injected_code": "__annotations__",
    "r14_wraps_copies_globals": "wraps",
    "r14_match_pattern_reads_globals": "class pattern",
}


@pytest.mark.parametrize("case", HONEST_ROUND14, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    result = honest_result(case, cache_dir, record, honest_results)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); samples {result.cpu_samples}")
    assert_accepted(result)


@pytest.mark.parametrize("case", HACKS_ROUND14, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}); samples {result.cpu_samples}")
    assert not (result.error and result.error.phase in ("internal", "task")), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)
    if case.id in NAMED:
        assert NAMED[case.id] in result.error.message, describe(result)
