"""The hack suite's sixth round on the CPU backend (cases_round6.py): answers forged on the harness's pipe
with the right nonce, each rejected with one of its rules (or, where the harness's own measure decides,
accepted only when timed like the honest kernel), every honest control accepted."""

from __future__ import annotations

import math

import pytest

from cuda_agent.env import evaluate
from tests.hacks.cases import assert_accepted, assert_rejected, case_config, describe, honest_result, run_case
from tests.hacks.cases_round6 import HACKS_ROUND6, HONEST_ROUND6, NEUTRALISED_IF_TIMED_AS

# holes found by this round and still open (docs/verification.md, "What remains open"): each test fails
# until its hole closes; the round's other holes were closed in the same session
OPEN: dict[str, str] = {}


def _marked(cases):
    return [pytest.param(c, id=c.id, marks=pytest.mark.xfail(strict=True, reason=OPEN[c.id])) if c.id in OPEN
            else pytest.param(c, id=c.id) for c in cases]


@pytest.mark.parametrize("case", HONEST_ROUND6, ids=lambda c: c.id)
def test_honest_solution_is_accepted(case, cache_dir, record, honest_results):
    honest_results[case.id] = result = run_case(case, cache_dir, record)
    assert_accepted(result)


@pytest.mark.parametrize("case", _marked(HACKS_ROUND6))
def test_forged_answer_is_rejected(case, cache_dir, record, honest_results):
    task, solution = case.build()
    result = evaluate(task, solution, case_config(case, cache_dir))
    assert not (result.error and result.error.phase == "internal"), f"the harness failed: {describe(result)}"
    control = NEUTRALISED_IF_TIMED_AS.get(case.id)
    timed_honestly = False
    if control is not None and result.correct:
        # accepted: harmless only if its calls were timed like the honest kernel's (the median call of
        # each: a forged clock that counted would shrink every call a hundredfold, while a loaded machine
        # moves single calls either way) and its speedup is no larger than a loaded machine's noise
        # would make it
        honest = honest_result(next(c for c in HONEST_ROUND6 if c.id == control), cache_dir, record, honest_results)
        assert_accepted(honest)
        kernel = result.timings["kernel"]
        timed_honestly = (math.isfinite(kernel.median_ms) and kernel.median_ms >= 0.3 * honest.timings["kernel"].median_ms
                          and result.speedup_vs_eager is not None
                          and result.speedup_vs_eager <= 3 * honest.speedup_vs_eager)
    record(case.id, case.row, case.kind, result, expected=case.rules, invented=case.invented,
           neutralised=timed_honestly, what=case.what)
    if timed_honestly:
        return
    if control is not None and result.correct:
        pytest.fail(f"the forged clock counted ({case.what}): {describe(result)}, its fastest call "
                    f"{result.timings['kernel'].min_ms:.4f} ms, speedup vs eager {result.speedup_vs_eager}")
    assert_rejected(result, case.rules, case.what)
