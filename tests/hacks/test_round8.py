"""The hack suite's eighth round on the CPU backend (cases_round8.py): work hidden from the outside CPU
clock, and the guard's record written back natively. The timing cheats are held to the time (and
reward) of the same loop in the calling thread (the process's CPU clock counts exited threads; the CPU
sandbox makes no processes); the forged record and the lingering child are rejected."""

from __future__ import annotations

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, describe, honest_result, run_case
from tests.hacks.cases_round8 import HACKS_ROUND8, HIDDEN_WORK_ROUND8, HONEST_ROUND8

COUNTED = 0.6   # the hidden loop must measure at least this share of the same loop in the calling thread
# Each side's eager time comes from its own evaluation, and on a loaded 2-core machine the two drift apart
# (2.4x seen in CI); a hidden loop read as no time fails every attempt, noise fails one.
ATTEMPTS = 3


@pytest.mark.parametrize("case", HONEST_ROUND8, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    assert_accepted(honest_result(case, cache_dir, record, honest_results))


@pytest.mark.parametrize("case,control", HIDDEN_WORK_ROUND8, ids=lambda c: getattr(c, "id", ""))
def test_hidden_work_is_counted(case, control, cache_dir, record, honest_results):
    honest = honest_result(control, cache_dir, record, honest_results)
    seen = []
    for attempt in range(ATTEMPTS):
        if attempt:   # the two evaluated again, back to back, under the load of the moment
            honest = run_case(control, cache_dir, record)
        assert_accepted(honest)
        result = run_case(case, cache_dir, record)
        assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
        print(f"{case.id}: {describe(result)}; {control.id}: {describe(honest)}")
        if result.error is not None:
            assert_rejected(result, case.rules, case.what)
            return
        # its time counted, and its speedup no larger than a loaded machine's noise makes the honest loop's
        if (result.kernel_ms >= COUNTED * honest.kernel_ms
                and result.speedup_vs_eager <= honest.speedup_vs_eager / COUNTED):
            return
        seen.append(f"{result.kernel_ms:.4f} ms (speedup {result.speedup_vs_eager:.2f}, reward {result.reward}) "
                    f"against {honest.kernel_ms:.3f} ms (speedup {honest.speedup_vs_eager:.2f}, reward {honest.reward})")
    pytest.fail(f"{case.what}: " + "; ".join(seen) + " for the same loop in the calling thread")


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

