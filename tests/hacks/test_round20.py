"""The hack suite's twentieth round on the CPU backend (cases_round20.py): a forward no faster than eager's made to
look faster, through the harness's overhead or eager's time. A speed cheat is caught when it earns no speed reward:
rejected by one of its rules, or accepted at reward 1 at most (check_cheat's reward -1 does not fit: the forward is
correct, and a correct slow kernel earns 1). The honest control, truly faster by a wide margin, keeps its speed
reward; the cheats' forward without its trick earns none."""

from __future__ import annotations

import random

import pytest

from tests.hacks.cases import assert_accepted, assert_rejected, check_honest_speed, describe, run_case
from tests.hacks.cases_round20 import HACKS_ROUND20, HONEST_ROUND20, PADDED

from cuda_agent.env.run import evaluation, schedule

# the cheats whose thread acts in the empty calls, told apart by their inputs where those come from one seed
KNOWING = [case for case in HACKS_ROUND20 if case.id in ("r20_empty_call_gil", "r20_empty_call_short_thread")]


def assert_no_speed_reward(case, result) -> None:
    """Rejected as the candidate's failure by one of the case's rules, or accepted without a speed reward."""
    assert not (result.error and result.error.phase in ("internal", "task")), f"the harness failed: {describe(result)}"
    if result.error is not None:
        assert_rejected(result, case.rules, case.what)
        return
    assert result.reward <= 1, (f"the cheat earned a speed reward ({case.what}): {describe(result)}, speedup "
                                f"{result.speedup_vs_eager:.2f} (95 % CI {result.speedup_ci.get('eager')})")


@pytest.mark.parametrize("case", HONEST_ROUND20, ids=lambda c: c.id)
def test_honest_solution_keeps_its_speed_reward(case, cache_dir, record, honest_results):
    check_honest_speed(case, cache_dir, record, honest_results)


def test_the_cheats_forward_alone_earns_no_speed_reward(cache_dir, record):
    result = run_case(PADDED, cache_dir, record)
    print(f"{PADDED.id}: {describe(result)} (speedup {result.speedup_vs_eager})")
    assert_accepted(result)
    assert result.reward <= 1, f"the control is faster than eager: {describe(result)}"


@pytest.mark.parametrize("case", HACKS_ROUND20, ids=lambda c: c.id)
def test_cheat_earns_no_speed_reward(case, cache_dir, record):
    result = run_case(case, cache_dir, record)
    print(f"{case.id}: {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci}); "
          f"samples {result.cpu_samples}")
    assert_no_speed_reward(case, result)


@pytest.mark.parametrize("case", KNOWING, ids=lambda c: c.id)
def test_cheat_that_knows_the_empty_calls_earns_no_speed_reward(case, cache_dir, record, monkeypatch):
    """The empty calls drawn from one seed again (as before this round), so that the cheat's thread knows them: the
    measure of the harness's steps by its own threads' time alone is what holds it."""
    def one_seed(settle: bool) -> list[schedule.Call]:
        return [schedule.Call("null", 0)] + ([schedule.Call("warmup", schedule.fresh_seed())] if settle else [])

    monkeypatch.setattr(schedule, "empty_calls", one_seed)
    monkeypatch.setattr(evaluation, "empty_calls", one_seed)
    result = run_case(case, cache_dir, record)
    print(f"{case.id} (one seed): {describe(result)} (speedup {result.speedup_vs_eager}, CI {result.speedup_ci})")
    assert_no_speed_reward(case, result)


def test_empty_calls_draw_fresh_inputs():
    """Each empty call's inputs come from a seed of its own (the judge draws them into the candidate's slot)."""
    from cuda_agent.env.run.schedule import timing_calls

    calls = timing_calls(2, 20, True, 12, random.Random(3), settle_nulls=True)
    seeds = [call.seed for call in calls if call.kind == "null"]
    assert len(seeds) == 12 and len(set(seeds)) == 12 and 0 not in seeds
