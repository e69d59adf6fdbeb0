"""Spares with kept judges (infra/spares.py, infra/judges.py): a spare is the candidate alone, and the
judge is taken when the evaluation's job starts, so only evaluations in flight hold judges. With fresh
judges a spare is still a judge and a candidate. The flag is let apply to the CPU backend
(`judges.BACKENDS`), whose lifecycle is the same."""

import asyncio

import pytest

from cuda_agent.env import EvalPool, evaluate
from cuda_agent.env.infra import judges, spares
from cuda_agent.env.run.worker_run import start_spare
from tests.env.helpers import WRONG_BODY, cpu_config, cpu_workspace, example_task, kernel, wait_for_kept_judges


@pytest.fixture
def kept(monkeypatch):
    """Kept judges for the CPU backend too; no idle judge and no spare before or after the test."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()
    spares.discard_all()
    yield
    spares.discard_all()
    judges.discard_all()


@pytest.fixture
def judge_starts(monkeypatch) -> list:
    """Every kept judge started (judges.start), in order."""
    started = []
    real = judges.start
    monkeypatch.setattr(judges, "start", lambda *args: started.append(real(*args)) or started[-1])
    return started


def _key(config) -> tuple:
    return (config.resolved_backend(), None, config.sandbox, str(config.cache_dir))


def test_with_kept_judges_a_spare_is_the_candidate_alone_and_takes_no_judge(cache_dir, kept, judge_starts,
                                                                            monkeypatch):
    taken = []
    real_take = judges.take
    monkeypatch.setattr(judges, "take", lambda *args: taken.append(args) or real_take(*args))
    config = cpu_config(cache_dir, prewarm=1)
    spares.prepare(_key(config), lambda folder: start_spare(config, "cpu", folder, None), None)
    [spare] = spares.waiting(_key(config))
    assert spare.judge is None and spare.candidate.role == "candidate" and spare.candidate.has_staging
    assert spare.staging_fd is not None   # kept for the judge its evaluation will take
    # the candidate's twin (run/twin.py) beside it, started alike with the same staging file, in a folder of its own
    assert spare.twin is not None and spare.twin.role == "twin" and spare.twin.has_staging
    assert spare.twin.log_path.parent.name == "twin"
    assert judge_starts == [] and taken == []
    spares.discard_all()
    monkeypatch.setenv(judges.ENV, "0")   # fresh judges: a judge and a candidate, as ever
    spares.prepare(_key(config), lambda folder: start_spare(config, "cpu", folder, None), None)
    [spare] = spares.waiting(_key(config))
    assert spare.judge is not None and spare.judge.role == "judge" and spare.judge.handover is None
    assert spare.staging_fd is None and judge_starts == [] and taken == []


def test_evaluations_one_after_another_on_spares_are_served_by_one_judge(cache_dir, kept, judge_starts, monkeypatch):
    """Each evaluation takes at its job's start the judge the one before gave back: one judge process
    serves them all, and the evaluations after the first run on spares' candidates."""
    served, taken = [], []
    real_give_back, real_take = judges.give_back, spares.take
    monkeypatch.setattr(judges, "give_back",
                        lambda judge, *args, **kwargs: served.append(judge) or real_give_back(judge, *args, **kwargs))
    monkeypatch.setattr(spares, "take", lambda key: taken.append(real_take(key)) or taken[-1])
    config = cpu_config(cache_dir, seed=1234, baselines=False, prewarm=1)
    results = []
    for solution in (cpu_workspace(), cpu_workspace(kernel(WRONG_BODY)), cpu_workspace()):
        wait_for_kept_judges()   # else the evaluation may start a judge of its own (judges.take's bounded wait)
        results.append(evaluate(example_task(), solution, config, stop_after="verify"))
    assert [r.correct for r in results] == [True, False, True], [r.error for r in results]
    assert len(judge_starts) == 1 and served == judge_starts * 3
    assert taken[0] is None and all(spare is not None and spare.judge is None for spare in taken[1:])


def test_a_pool_with_kept_judges_starts_no_more_judges_than_evaluations_in_flight(cache_dir, kept, judge_starts,
                                                                                  monkeypatch):
    """The pool keeps three spares per evaluation in flight; none of them holds a judge, and an
    evaluation starts one only when no judge is idle (an idle one finishing is waited for: the bound
    raised here so that a loaded machine cannot make it start one)."""
    monkeypatch.setattr(judges, "TAKE_WAIT_S", 120.0)
    wrong = cpu_workspace(kernel(WRONG_BODY))
    jobs = [(example_task(), wrong if i == 1 else cpu_workspace()) for i in range(3)]
    pool = EvalPool(cpu_config(cache_dir, seed=1234, baselines=False, prewarm=True), cpu_slots=1, per_device=2,
                    processes=False)
    results = asyncio.run(pool.evaluate_many(jobs))
    assert [r.correct for r in results] == [True, False, True], [r.error for r in results]
    assert 1 <= len(judge_starts) <= pool.capacity == 2
    assert all(spare.judge is None for spare in spares.waiting(_key(pool.config)))
