"""Spare worker pairs (infra/spares.py): started ahead, in the caller's thread or, where a pair's start
may wait (kept judges), in a thread of its own; none outlives the process."""

import threading
from pathlib import Path

from cuda_agent.env.infra import spares


class _Pair:
    """A pair whose two workers are alive."""

    def __init__(self, job_dir: Path):
        from types import SimpleNamespace

        alive = SimpleNamespace(proc=SimpleNamespace(poll=lambda: None))
        self.job_dir, self.judge, self.candidate, self.discarded = job_dir, alive, alive, False

    def discard(self):
        self.discarded = True


def test_a_pair_prepared_in_the_background_does_not_hold_up_its_caller(tmp_path, monkeypatch):
    monkeypatch.setattr(spares, "_spares", {})
    may_start, started = threading.Event(), []

    def start(folder):   # a start that waits (a kept judge finishing its last job)
        may_start.wait(10)
        started.append(_Pair(folder))
        return started[-1]

    thread = spares.prepare_in_background(("cpu", None), start, str(tmp_path))
    assert thread.is_alive() and spares.take(("cpu", None)) is None   # the caller went on at once
    may_start.set()
    thread.join(10)
    assert spares.take(("cpu", None)) is started[0] and not started[0].discarded


def test_a_pair_started_as_the_process_exits_is_discarded(tmp_path, monkeypatch):
    monkeypatch.setattr(spares, "_spares", {})
    may_start, started = threading.Event(), []

    def start(folder):
        may_start.wait(10)
        started.append(_Pair(folder))
        return started[-1]

    thread = spares.prepare_in_background(("cpu", None), start, str(tmp_path))
    spares._at_exit()   # what atexit runs
    try:
        may_start.set()
        thread.join(10)
        assert started and started[0].discarded and spares.take(("cpu", None)) is None
    finally:
        monkeypatch.setattr(spares, "_closing", False)


def test_with_kept_judges_an_evaluation_prepares_its_spares_in_the_background(cache_dir, monkeypatch):
    """(Kept judges let apply to the CPU backend here; the lifecycle is the same.)"""
    from cuda_agent.env import evaluate
    from cuda_agent.env.infra import judges
    from tests.env.helpers import cpu_config, cpu_workspace, example_task

    calls = []
    monkeypatch.setattr(spares, "prepare", lambda *args: calls.append("here"))
    monkeypatch.setattr(spares, "prepare_in_background", lambda *args: calls.append("background"))
    monkeypatch.setattr(judges, "BACKENDS", {"cuda", "cpu"})
    config = cpu_config(cache_dir, baselines=False, prewarm=1)
    monkeypatch.delenv(judges.ENV, raising=False)
    evaluate(example_task(), cpu_workspace(), config, stop_after="compile")
    monkeypatch.setenv(judges.ENV, "1")
    try:
        evaluate(example_task(), cpu_workspace(), config, stop_after="compile")
    finally:
        judges.discard_all()
    assert calls == ["here", "background"]
