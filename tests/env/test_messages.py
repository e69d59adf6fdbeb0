"""The messages between the harness and its workers (env/workers/messages.py): each round-trips through
its JSON line, a worker's dispatch table refuses a command it has no handler for, and the harness
refuses an answer that is not the one its command expects (the candidate's answers are untrusted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from typing import Literal

import pytest

from cuda_agent.env import EvalConfig
from cuda_agent.env.infra.isolation import start_worker
from cuda_agent.env.workers import candidate, judge, messages as msg
from cuda_agent.env.workers.protocol import ChildDied, ForgedMessage, ParentChannel
from tests.env.helpers import example_task

CONFIG = replace(EvalConfig(backend="cpu", atol=0.5, guard=False), seed=1234)


def _line(message: msg.Message) -> dict:
    """What the other end reads: the message's JSON line, parsed."""
    return json.loads(json.dumps(message.wire()))


def test_a_job_round_trips_with_its_config_as_the_model():
    job = msg.JudgeJob(task_code="x = 1", task_name="t", backend="cpu", config=CONFIG, box="/box",
                       footprint={"input_bytes": 4, "output_bytes": None}, batch=8)
    back = msg.JudgeJob.model_validate(_line(job))
    assert back == job
    assert isinstance(back.config, EvalConfig) and back.config == CONFIG
    assert back.config.seed == 1234 and back.config.atol == 0.5 and back.config.guard is False
    assert back.save_init is True and back.lock is None   # defaults, never sent
    assert "lock" not in _line(job) and "save_init" not in _line(job)


def test_a_config_the_workers_could_not_use_is_refused_on_arrival():
    line = _line(msg.CandidateJob(task_inputs_code="", solution_dir="/s", backend="cpu", config=CONFIG, box="/b"))
    line["config"]["protocol"] = "lenient"
    with pytest.raises(ValueError, match="protocol"):
        msg.CandidateJob.model_validate(line)


def test_commands_round_trip_and_always_name_themselves():
    assert _line(msg.Compile()) == {"cmd": "compile"}
    assert _line(msg.Finish()) == {"cmd": "finish"}
    sent = [msg.Prepare(seed=7, transform="spikes", save=True),
            msg.CandidateCall(index=3, seed=7, transform=None, save=False, null=True, slot=1, release=True),
            msg.CandidateCall(index=4, seed=8, inputs={"slot": 0, "layout": {"tree": [0]}}),
            msg.Draw(index=3, seed=7, slot=1), msg.Write(index=3), msg.Dependence(later=True),
            msg.JudgeCalls(items=[{"index": 3, "seed": 7, "transform": None, "time": True, "compile": False,
                                   "compare": {"samples": {"tensors": []}}, "dependence": True},
                                  {"index": 4, "seed": 8, "compare": {"path": "/o.bin", "layout": None, "slot": 0}}])]
    table = {**judge.HANDLERS, **{k: v for k, v in candidate.HANDLERS.items() if k is not msg.CandidateCall}}
    for message in sent:
        line = _line(message)
        assert line["cmd"] == message.cmd
        side = {msg.CandidateCall: candidate.HANDLERS}.get(type(message), table)
        assert msg.read_command(line, side) == message
    # the solution's load, read by the candidate alone after its job's empty calls
    load = msg.LoadSolution(prebuilt={"cuda_extension": "/b/lib/cuda_extension.so"})
    assert msg.read_command(_line(load), (msg.LoadSolution,)) == load
    assert _line(msg.LoadSolution()) == {"cmd": "load_solution"}
    calls = msg.read_command(_line(sent[-1]), judge.HANDLERS)
    first, second = calls.items
    # a key's presence, not its value, says what the judge compares: samples sent as null are compared
    assert first.compare.has("samples") and not first.compare.has("path")
    assert second.compare.has("path") and second.compare.has("slot") and second.compare.has("layout")
    assert msg.JudgeCall(seed=1, compare={"samples": None}).compare.has("samples")


def test_answers_round_trip_as_the_fields_their_sender_set():
    verdict = msg.Verdict(ok=False, max_abs_error=float("inf"), message="wrong", rule=None, worst=[1.0, 2.0])
    assert msg.read_answer(_line(verdict), msg.Verdict) == {"ok": False, "max_abs_error": float("inf"),
                                                           "message": "wrong", "rule": None, "worst": [1.0, 2.0]}
    batch = msg.Verdicts(answers=[verdict, msg.Verdict(ok=True, skipped="not finite")])
    fields = msg.read_answer(_line(batch), msg.Verdicts)
    assert fields["answers"][1] == {"ok": True, "skipped": "not finite"}
    assert "task_error" not in fields["answers"][0]   # the harness tests for the key
    samples = {"tensors": [{"positions": list(range(2048)), "values": [0.5] * 2048}]}
    out = msg.CallAnswer(ok=True, ms=0.25, host_ms=None, samples=samples, calls=2, timer="held")
    assert msg.read_answer(_line(out), msg.CallAnswer) == out.fields()
    assert msg.read_answer(_line(out), msg.CallAnswer)["samples"] == samples


@pytest.mark.parametrize("raw, why", [
    ({"ok": True, "ms": 0.1, "read_outside": True}, "a field the candidate may not set"),
    ({"ok": "yes", "ms": 0.1}, "not a boolean"),
    ({"ok": True, "calls": 1.5}, "not a count"),
    ({"ms": 0.1}, "no outcome"),
    ({"ok": True, "answers": []}, "another command's answer"),
    ({"request": "build", "name": "x", "files": {}, "path": "/tmp/x.so"}, "a build request with more in it"),
    ({"ok": True, "ms": float("nan")}, "a time that is not a number"),
    ({"ok": True, "ms": float("inf")}, "an infinite time"),
    ({"ok": True, "host_ms": -1.0}, "a negative time"),
    ({"ok": False}, "a failure without its message"),
])
def test_a_malformed_answer_is_refused(raw, why):
    with pytest.raises(ValueError):
        msg.read_answer(raw, msg.CallAnswer)


def test_only_the_candidate_may_ask_for_a_build_before_it_answers():
    request = {"request": "build", "name": "ext", "files": {"a.cpp": ""}, "extra_cflags": ["-O3"]}
    assert msg.read_answer(request, msg.Initialised) == request
    with pytest.raises(ValueError):
        msg.read_answer(request, msg.Verdict)


@pytest.mark.parametrize("raw", [{"cmd": "prepare", "seed": 1}, {"cmd": "shutdown"}, {"seed": 1}, ["compile"],
                                 {"cmd": "draw", "index": 1, "slot": 0}])
def test_the_judges_dispatch_table_refuses_what_it_has_no_handler_for(raw):
    with pytest.raises(msg.UnknownMessage):
        msg.read_command(raw, judge.HANDLERS)


def test_the_candidates_dispatch_table_refuses_the_judges_commands():
    with pytest.raises(msg.UnknownMessage):
        msg.read_command(_line(msg.Draw(index=1, seed=1, slot=0)), candidate.HANDLERS)
    assert isinstance(msg.read_command({"cmd": "final"}, candidate.HANDLERS), msg.Final)


def _channel():
    """A ParentChannel over a real pipe (the worker's end written by the test), its commands to `cat`."""
    read_fd, write_fd = os.pipe()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    return ParentChannel(proc, read_fd), os.fdopen(write_fd, "w", buffering=1), proc


@pytest.mark.parametrize("answer, refused", [
    ({"ok": True}, False),
    ({"ok": False, "message": "a thread kept working", "rule": "background-thread"}, False),
    ({"ok": True, "ms": 1e-4, "samples": None, "calls": 1}, True),   # a call's answer, not prepare's
    ({"ok": True, "wall_ms": 1e-4}, True),              # a field the harness sets itself
    ({"ok": 1}, True),
    ({"weights": "seed"}, True),
])
def test_the_harness_channel_refuses_an_answer_its_command_does_not_expect(answer, refused):
    chan, worker_end, proc = _channel()
    try:
        worker_end.write(json.dumps({"ready": True, "pid": proc.pid, "device_setup": [0.0, 1.0]}) + "\n")
        assert chan.receive(5)["ready"] is True
        chan.send(msg.Prepare(seed=1))
        worker_end.write(json.dumps({**answer, "nonce": chan._nonce}) + "\n")
        if refused:
            with pytest.raises(ForgedMessage, match="malformed answer"):
                chan.receive(5)
        else:
            assert chan.receive(5) == answer
        chan.send(msg.Final())
        worker_end.write(json.dumps({"ok": True, "nonce": "not ours"}) + "\n")   # the nonce is still checked
        with pytest.raises(ForgedMessage, match="answers no command"):
            chan.receive(5)
    finally:
        proc.kill()
        proc.wait()
        worker_end.close()
        chan.close()


def test_a_worker_ends_on_a_command_outside_its_dispatch_table(tmp_path):
    """A real judge: it answers its job, then a command it has no handler for ends it."""

    class Shutdown(msg.Command):
        answer = msg.Kept
        cmd: Literal["shutdown"] = "shutdown"

    task = example_task()
    worker = start_worker("judge", tmp_path, "cpu", None)
    try:
        worker.wait_ready()
        worker.send(msg.JudgeJob(task_code=task.code, task_name=task.name, backend="cpu", config=CONFIG,
                                 box=str(tmp_path / "box"), save_init=False))
        assert worker.channel.receive(60)["ok"] is True
        worker.send(msg.InputsKept())
        assert worker.channel.receive(60) == {"mutated": []}
        worker.send(Shutdown())
        with pytest.raises(ChildDied):
            worker.channel.receive(60)
        assert worker.proc.wait(10) == 0
    finally:
        worker.kill()


def test_an_initialised_answer_says_how_weights_matched_and_whether_it_has_staging():
    assert msg.read_answer({"ok": True, "weights": "seed", "staging": True}, msg.Initialised)["staging"] is True
    for bare in ({"ok": True}, {"ok": True, "weights": "seed"}):
        with pytest.raises(ValueError):
            msg.read_answer(bare, msg.Initialised)


@pytest.mark.parametrize("line", ["[" * 100_000 + "]" * 100_000, '{"ok": true, "calls": ' + "9" * 5001 + "}"])
def test_a_line_the_json_parser_cannot_take_is_forged_not_a_crash(line):
    import threading

    chan, worker_end, proc = _channel()
    writer = threading.Thread(target=lambda: worker_end.write(line + "\n"))   # longer than a pipe holds
    writer.start()
    try:
        with pytest.raises(ForgedMessage, match="malformed line"):
            chan.receive(5)
        writer.join(5)
    finally:
        proc.kill()
        proc.wait()
        worker_end.close()
        chan.close()


def test_a_worker_reports_only_the_rules_its_own_checks_decide():
    from cuda_agent.env.rules import registry as rules

    assert rules.reported("torch-op") == "torch-op" and rules.reported("forged-samples") == "forged-samples"
    for decided_by_the_harness in ("sandbox", "too-large", "timeout", "crash", "clock-disagreement", "static:ctypes"):
        assert rules.reported(decided_by_the_harness) == "protocol-forgery"
    assert rules.reported(rules.TIMEOUT) == "timeout"   # the harness's own
