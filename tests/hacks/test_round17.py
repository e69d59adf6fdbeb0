"""The hack suite's seventeenth round on the CPU backend (cases_round17.py): a forward computed by the interpreter,
the standard library's extension modules or a system library reached through them, and inputs meant to fail round
sixteen's build checks. Each cheat must be rejected as the candidate's failure (never the harness's: phase
"internal"), and the honest controls beside them accepted."""

from __future__ import annotations

import pytest

from tests.hacks.cases import check_cheat, check_honest
from tests.hacks.cases_round17 import HACKS_ROUND17, HONEST_ROUND17

# what the verdict must name, where the rule alone would not show that the fix is what caught it
NAMED = {
    "r17_interpreter_builtins": "in the Python interpreter",
    "r17_exec_bytecode": "in the Python interpreter",
    "r17_decimal_preloaded": "in the Python interpreter",
    "r17_sqlite_system_library": "[loaded late]",
    "r17_linked_sqlite": "[loaded late]",
}


@pytest.mark.parametrize("case", HONEST_ROUND17, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    check_honest(case, cache_dir, record, honest_results)


@pytest.mark.parametrize("case", HACKS_ROUND17, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    check_cheat(case, cache_dir, record, NAMED.get(case.id))

