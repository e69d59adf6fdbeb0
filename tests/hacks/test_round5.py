"""The hack suite's fifth round on the CPU backend (cases_round5.py): every cheat rejected with one of its
rules (or, where a fix may make it harmless, accepted only when timed like the honest kernel it imitates),
every honest control accepted."""

from __future__ import annotations

import pytest

from cuda_agent.env import evaluate
from tests.hacks.cases import assert_accepted, assert_rejected, case_config, describe, honest_result, run_case
from tests.hacks.cases_round5 import HACKS_ROUND5, HONEST_ROUND5, NEUTRALISED_IF_TIMED_AS


@pytest.mark.parametrize("case", HONEST_ROUND5, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    honest_results[case.id] = result = run_case(case, cache_dir, record)
    assert_accepted(result)


@pytest.mark.parametrize("case", HACKS_ROUND5, ids=lambda c: c.id)
def test_hack_is_rejected(case, cache_dir, record, honest_results):
    task, solution = case.build()
    result = evaluate(task, solution, case_config(case, cache_dir))
    control = NEUTRALISED_IF_TIMED_AS.get(case.id)
    timed_honestly = False
    if control is not None and result.correct:
        # The trick got no inputs to work on (every call computed in forward): harmless, if its calls were
        # timed like the honest kernel's (the fastest call of each: the least disturbed by a loaded machine).
        honest = honest_result(next(c for c in HONEST_ROUND5 if c.id == control), cache_dir, record, honest_results)
        assert_accepted(honest)
        timed_honestly = result.timings["kernel"].min_ms >= 0.3 * honest.timings["kernel"].min_ms
    record(case.id, case.row, case.kind, result, expected=case.rules, invented=case.invented,
           neutralised=timed_honestly, what=case.what)
    if timed_honestly:
        return
    if control is not None and result.correct:
        pytest.fail(f"the cheat got through ({case.what}): {describe(result)}, its fastest call "
                    f"{result.timings['kernel'].min_ms:.4f} ms")
    assert_rejected(result, case.rules, case.what)


def test_honest_controls_pass_the_published_protocol_too(cache_dir):
    """The paper's protocol (the task's own draws at atol = rtol = 1e-2) keeps every honest control too."""
    for case in HONEST_ROUND5:
        task, solution = case.build()
        result = evaluate(task, solution, case_config(case, cache_dir, protocol="published"))
        assert result.protocol == "published"
        assert_accepted(result)
