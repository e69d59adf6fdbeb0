"""A worker that never became ready is the harness's failure, not the solution's: the evaluation runs
once more from scratch with workers started anew (run/start_retry.py, Failed.not_started); any other
failure stands as it is."""

import pytest

from cuda_agent.env import evaluate
from cuda_agent.env.infra import forkserver, judges, spares
from cuda_agent.env.infra.isolation import Worker
from cuda_agent.env.run import worker_run
from cuda_agent.env.workers.protocol import ChildDied
from tests.env.helpers import HONEST_BODY, cpu_config, cpu_workspace, example_task, kernel


@pytest.fixture
def started(monkeypatch) -> list[str]:
    """The role of every worker the evaluations start, in order."""
    roles: list[str] = []
    real = worker_run._start_worker
    monkeypatch.setattr(worker_run, "_start_worker", lambda role, *args: roles.append(role) or real(role, *args))
    return roles


def test_a_worker_that_did_not_start_is_started_anew_and_the_evaluation_goes_on(cache_dir, monkeypatch, started):
    """The first attempt's judge is a kept one and a spare pair is asked for; the second attempt
    takes neither."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()
    taken, prepared, kept = [], [], []
    monkeypatch.setattr(spares, "take", lambda key: taken.append(key))   # none waiting
    monkeypatch.setattr(spares, "prepare", lambda *args: prepared.append(args))
    real_judge_for, real_wait_ready = judges.judge_for, Worker.wait_ready
    monkeypatch.setattr(judges, "judge_for", lambda *args: kept.append(args) or real_judge_for(*args))
    waits: list[str] = []

    def wait_ready(worker, *args):
        waits.append(worker.role)
        if len(waits) == 1:
            raise ChildDied("worker exited with code 1")
        return real_wait_ready(worker, *args)

    monkeypatch.setattr(Worker, "wait_ready", wait_ready)
    try:
        result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, baselines=False, prewarm=1),
                          stop_after="verify")
    finally:
        judges.discard_all()
    assert result.error is None, result.error
    assert result.correct and result.max_abs_error == [0.0] * 8
    assert len(taken) == len(prepared) == len(kept) == 1   # the first attempt's alone
    assert started == ["candidate", "judge", "candidate"]   # (the first judge came from judges.start)
    assert any("could not start the judge worker: worker exited with code 1" in w and "run again" in w
               for w in result.warnings), result.warnings


def test_with_kept_judges_the_judge_a_spare_s_evaluation_takes_that_did_not_start_is_started_anew(
        cache_dir, monkeypatch, started):
    """With kept judges a spare is a candidate alone: the evaluation that takes it asks for its judge
    when its job starts (here none idle: one started), and that judge's failure to start has the
    evaluation run again with workers of its own."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()
    spares.discard_all()
    config = cpu_config(cache_dir, baselines=False, prewarm=1)
    key = ("cpu", None, config.sandbox, str(config.cache_dir))
    spares.prepare(key, lambda folder: worker_run.start_spare(config, "cpu", folder, None), None)
    [spare] = spares.waiting(key)
    events: list[str] = []
    real_take, real_judge_for, real_wait_ready = spares.take, judges.judge_for, Worker.wait_ready
    monkeypatch.setattr(spares, "take", lambda key: events.append("spare taken") or real_take(key))
    monkeypatch.setattr(spares, "prepare", lambda *args: events.append("spare asked for"))
    monkeypatch.setattr(judges, "judge_for", lambda *args: events.append("judge taken") or real_judge_for(*args))

    def wait_ready(worker, *args):
        if worker.role == "judge" and "judge failed" not in events:
            events.append("judge failed")
            raise ChildDied("worker exited with code 1")
        return real_wait_ready(worker, *args)

    monkeypatch.setattr(Worker, "wait_ready", wait_ready)
    try:
        result = evaluate(example_task(), cpu_workspace(), config, stop_after="verify")
    finally:
        spares.discard_all()
        judges.discard_all()
    assert result.error is None, result.error
    assert result.correct and result.max_abs_error == [0.0] * 8
    assert events == ["spare taken", "spare asked for", "judge taken", "judge failed"]   # the second attempt: none
    assert spare.judge is None and spare.candidate.proc.wait(10) is not None   # it served the first attempt
    # the spare's (with its twin); the second attempt's (fresh judge; no twin where nothing is timed)
    assert started == ["candidate", "twin", "judge", "candidate"]
    assert any("could not start the judge worker: worker exited with code 1" in w and "run again" in w
               for w in result.warnings), result.warnings


def test_a_kept_judge_that_dies_before_its_staging_file_reaches_it_is_started_anew(cache_dir, monkeypatch, started):
    """With kept judges, a judge started for the evaluation gets its staging file over its socket
    before it is waited for: one that died at once makes that hand-over fail (OSError), the same
    failure to start as a silent worker's."""
    monkeypatch.setenv(judges.ENV, "1")
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    judges.discard_all()
    real_hand = judges.hand_staging
    handed: list[int] = []

    def hand_staging(sock, fd):
        handed.append(fd)
        if len(handed) == 1:
            raise BrokenPipeError(32, "Broken pipe")
        return real_hand(sock, fd)

    monkeypatch.setattr(judges, "hand_staging", hand_staging)
    try:
        result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, baselines=False), stop_after="verify")
    finally:
        judges.discard_all()
    assert result.error is None, result.error
    assert result.correct and len(handed) == 1   # the second attempt's judge is not a kept one
    assert any("could not start the judge worker: [Errno 32] Broken pipe" in w and "run again" in w
               for w in result.warnings), result.warnings


def test_a_worker_that_never_starts_fails_once_after_two_attempts(cache_dir, tmp_path, monkeypatch, started):
    """Every judge's folder is gone when it is forked: its chdir fails, each attempt alike."""
    monkeypatch.delenv(judges.ENV, raising=False)
    monkeypatch.delenv("CUDA_AGENT_FORK_JUDGES", raising=False)
    real = forkserver.fork_worker
    gone = tmp_path / "gone"
    monkeypatch.setattr(forkserver, "fork_worker", lambda role, env, cwd, *args, **kwargs: real(role, env, gone, *args, **kwargs))
    result = evaluate(example_task(), cpu_workspace(), cpu_config(cache_dir, baselines=False))
    assert started == ["judge", "candidate", "twin"] * 2   # the twin: its timed calls' empty calls (run/twin.py)
    assert not result.correct and result.error.phase == "internal" and result.reward == -1
    message = result.error.message
    assert message.startswith("tried twice") and "could not start the judge worker" in message
    assert "FileNotFoundError" in message and str(gone) in message   # the child's own traceback (forkserver.py)


def test_a_failure_of_another_kind_is_not_tried_again(cache_dir, started):
    crash = '*(volatile char*)const_cast<char*>("read-only") = 0;\n' + HONEST_BODY
    result = evaluate(example_task(), cpu_workspace(kernel(crash)), cpu_config(cache_dir, baselines=False),
                      stop_after="verify")
    assert result.error.phase == "verify" and result.error.rule == "crash"
    assert started == ["judge", "candidate"]
    assert not any("run again" in w for w in result.warnings)
