"""The hack suite's eighth round on the CPU backend (cases_round8.py): work hidden from the outside CPU
clock, and the guard's record written back natively. The timing cheats are held to the time (and
reward) of the same loop in the calling thread (the process's CPU clock counts exited threads; the CPU
sandbox makes no processes); the forged record and the lingering child are rejected."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_held, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round8 import HACKS_ROUND8, HIDDEN_WORK_ROUND8, HONEST_ROUND8


@pytest.mark.parametrize("case", HONEST_ROUND8, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    assert_accepted(honest_result(case, cache_dir, record, honest_results))


@pytest.mark.parametrize("case,control", HIDDEN_WORK_ROUND8, ids=lambda c: getattr(c, "id", ""))
def test_hidden_work_is_counted(case, control, cache_dir, record, honest_results):
    assert_held(case, control, cache_dir, record, honest_results)


def _no_perf_sampling() -> str | None:
    """Why the harness cannot sample a process's CPU time from outside here (None: it can)."""
    import subprocess

    from cuda_agent.env.measure.perf_sampler import PerfUnavailable, Sampler

    child = subprocess.Popen(["sleep", "30"])
    try:
        Sampler(child.pid).attach().close()
        return None
    except PerfUnavailable as exc:
        return str(exc)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize("case", HACKS_ROUND8, ids=lambda c: c.id)
def test_cheat_is_rejected(case, cache_dir, record):
    if case.id == "r8_guard_record_restored_natively" and (why := _no_perf_sampling()):
        pytest.skip(f"only the harness's perf sampling sees it, unavailable here: {why}")
    result = run_case(case, cache_dir, record)
    assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
    assert_rejected(result, case.rules, case.what)

