"""The candidate's twin (run/twin.py, workers/candidate.py `run_twin`): the harness's empty calls answered by a
worker that never loads a solution, in a folder the candidate's box does not hold."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.env.run.worker_run import box_of, twin_dir
from cuda_agent.env.workers import messages as msg
from cuda_agent.env.workers.candidate import run_twin


class _Channel:
    def __init__(self, commands: list):
        self.commands, self.sent = list(commands), []

    def receive(self) -> dict:
        return self.commands.pop(0)

    def send(self, message) -> None:
        self.sent.append(message)


class _Candidate:
    def __init__(self):
        self.calls, self.loaded = [], False

    def call(self, cmd):
        self.calls.append(cmd)
        return {"ok": True, "ms": 0.0}

    def load(self):   # never called: the twin has no solution to load
        self.loaded = True


def _call(null: bool) -> dict:
    staged = {"slot": 0, "layout": {"kind": "tensor", "dtype": "float32", "shape": [2]}}
    return msg.CandidateCall(index=1, seed=5, null=null, inputs=staged).model_dump()


def test_the_twin_answers_empty_calls_and_nothing_else():
    candidate, chan = _Candidate(), _Channel([_call(True), _call(True), _call(False), _call(True)])
    run_twin(candidate, chan)
    assert isinstance(chan.sent[0], msg.Loaded) and chan.sent[0].ok   # its job's answer: nothing loaded
    assert [type(answer) for answer in chan.sent[1:3]] == [msg.CallAnswer, msg.CallAnswer]
    assert isinstance(chan.sent[3], msg.Answer) and not chan.sent[3].ok   # a real call ends it
    assert len(candidate.calls) == 2 and all(cmd.null for cmd in candidate.calls) and not candidate.loaded
    assert chan.commands == [_call(True)]


def test_the_twins_folder_is_outside_the_candidates_box(tmp_path):
    job = tmp_path / "job"
    assert not Path(twin_dir(job)).resolve().is_relative_to(Path(box_of(job)).resolve())
    assert box_of(twin_dir(job)) != box_of(job)


def test_the_interpreters_baseline_is_the_twins_unless_the_candidates_own_is_lower():
    """The sampler judges a timed call's interpreter time beyond an empty call's: the twin's empty calls (where no
    solution runs), or the candidate's own where lower: its code there can only lower the baseline."""
    from cuda_agent.env.rules.op_samples import INTERPRETER_NULLS, OpSampling

    sampling = OpSampling.__new__(OpSampling)   # no perf events: only the baseline's choice
    sampling.interpreter = {"timed": [], "null": [0.5] + [0.004] * 6}   # the first call warms the process up
    sampling.twin_null = None
    assert sampling.null_interpreter() == [0.004] * 6
    sampling.twin_null = [0.001] * (INTERPRETER_NULLS - 1)   # too few yet
    assert sampling.null_interpreter() == [0.004] * 6
    sampling.twin_null.append(0.001)
    assert sampling.null_interpreter() == [0.001] * INTERPRETER_NULLS   # raised by the candidate's code: the twin's
    sampling.twin_null[:] = [0.009] * INTERPRETER_NULLS
    assert sampling.null_interpreter() == [0.004] * 6
