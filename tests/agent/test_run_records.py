"""The edit loop's records: a command on unchanged files answers from the record of the command that
last evaluated them, and anything that changes the answer (one byte of the files, a setting, another
evaluator) evaluates again. Fast tests with the fake evaluator (the tools' in-memory records, a
session), then the workspace's scripts for real on the CPU backend (their records on disk)."""

import os
import subprocess
import time
from dataclasses import replace

import pytest

from cuda_agent.agent.run_records import RunRecords, record_key
from cuda_agent.agent.session import KernelSession
from cuda_agent.agent.workspace import RECORDS_FILE, Workspace, _evaluator_tag
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalError, EvalResult

from .conftest import RELU_BINDING, RELU_MODEL_NEW

ANSWERED = "answered from its record, not evaluated again"


def make(tmp_path, task, evaluator, **config):
    ws = Workspace.create(task, tmp_path / "ws", evaluator=evaluator,
                          eval_config=EvalConfig(backend="cpu", cache_dir=tmp_path / "c", **config))
    (ws.root / "kernels" / "relu_binding.cpp").write_text(RELU_BINDING)
    (ws.root / "model_new.py").write_text(RELU_MODEL_NEW)
    return ws


def test_unchanged_files_answer_from_the_record_and_one_byte_evaluates_again(tmp_path, relu_task, fake_evaluator):
    ws = make(tmp_path, relu_task, fake_evaluator)
    first = ws.verify()
    assert first.ok and first.answered_by is None and ANSWERED not in first.text
    again = ws.verify()
    assert len(fake_evaluator.calls) == 1   # nothing evaluated the second time
    assert again.ok and again.answered_by == "verify"
    assert again.text == first.text + "\n(unchanged since the last verify: " + ANSWERED + ")"
    assert again.result.to_dict() == first.result.to_dict() and again.solution.files == first.solution.files

    binding = ws.root / "kernels" / "relu_binding.cpp"
    binding.write_text(RELU_BINDING.replace("0.f;", "0.0;", 1))   # one byte more
    edited = ws.verify()
    assert len(fake_evaluator.calls) == 2 and edited.answered_by is None
    assert fake_evaluator.calls[-1][0].files["kernels/relu_binding.cpp"] == binding.read_text()
    binding.write_text(RELU_BINDING)   # back to what was verified: keyed by content, its record answers
    assert ws.verify().answered_by == "verify" and len(fake_evaluator.calls) == 2


def test_which_record_answers_which_command(tmp_path, relu_task, fake_evaluator):
    ws = make(tmp_path, relu_task, fake_evaluator)
    ws.verify()
    profiled = ws.profile()   # a verify does not time anything: profile evaluates
    assert profiled.answered_by is None and len(fake_evaluator.calls) == 2 and "reward" in profiled.text
    assert fake_evaluator.calls[-1][1].baselines
    verified = ws.verify()
    assert verified.answered_by == "verify"
    (ws.root / "model_new.py").write_text(RELU_MODEL_NEW + "\n")
    ws.profile()
    verified = ws.verify()   # the profile verified these files before timing them
    assert verified.answered_by == "profile" and verified.text.startswith("verify: PASSED")
    assert verified.text.endswith("(unchanged since the last profile, which verified these files before timing "
                                  "them: " + ANSWERED + ")")
    compiled = ws.compile()
    assert compiled.answered_by == "profile" and compiled.text == (
        "compile: OK\n(unchanged since the last profile, which built these files too: " + ANSWERED + ")")
    assert ws.profile().answered_by == "profile" and len(fake_evaluator.calls) == 3


def test_a_profile_that_failed_after_verification_does_not_answer_verify(tmp_path, relu_task, fake_evaluator):
    def evaluator(task, solution, config):
        r = fake_evaluator(task, solution, config)
        if config.baselines:   # profile: verification passed, then a timed call's output was wrong
            r.correct, r.reward = False, -1
            r.error = EvalError("profile", "an output produced while timing is wrong", rule="recheck-after-timing")
        return r

    ws = make(tmp_path, relu_task, evaluator)
    assert not ws.profile().ok
    assert ws.profile().answered_by == "profile"   # the same files fail the same way
    verified = ws.verify()
    assert verified.answered_by is None and verified.ok and len(fake_evaluator.calls) == 2


def test_compile_answered_by_a_failed_verify_says_only_what_compile_would(tmp_path, relu_task, fake_evaluator):
    ws = make(tmp_path, relu_task, fake_evaluator)
    (ws.root / "model_new.py").write_text(RELU_MODEL_NEW.replace("return cuda_extension.relu(x)",
                                                                "raise NotImplementedError"))
    verified = ws.verify()
    assert not verified.ok and verified.result.error.phase == "verify"
    compiled = ws.compile()
    assert compiled.ok and compiled.answered_by == "verify" and len(fake_evaluator.calls) == 1
    assert compiled.text.startswith("compile: OK\n(unchanged since the last verify, which built these files too")
    assert compiled.result.error is None and verified.result.error is not None   # the record itself is untouched
    (ws.root / "kernels" / "relu_binding.cpp").write_text(RELU_BINDING + "#error planted\n")
    ws.verify()
    compiled = ws.compile()   # a build failure is compile's answer too
    assert not compiled.ok and compiled.answered_by == "verify" and "planted" in compiled.text


@pytest.mark.parametrize("error", [EvalError("internal", "a bug of ours"),
                                   EvalError("verify", "timed out after 60 s", rule="timeout"),
                                   EvalError("verify", "the solution died", rule="crash")])
def test_failures_that_may_not_recur_are_not_kept(tmp_path, relu_task, error):
    calls = []

    def evaluator(task, solution, config):
        calls.append(config)
        return EvalResult(task=task.name, backend="cpu", compiled=True, error=error)

    ws = make(tmp_path, relu_task, evaluator)
    ws.verify()
    assert ws.verify().answered_by is None and len(calls) == 2


def test_a_failure_of_the_solution_is_kept(tmp_path, relu_task, fake_evaluator):
    ws = make(tmp_path, relu_task, fake_evaluator)
    (ws.root / "kernels" / "relu_binding.cpp").write_text(RELU_BINDING + "#error planted\n")
    failed = ws.compile()
    again = ws.compile()
    assert not again.ok and again.answered_by == "compile" and "planted" in again.text
    assert len(fake_evaluator.calls) == 1 and again.text.startswith(failed.text)


def test_other_settings_evaluate_again(tmp_path, relu_task, fake_evaluator, monkeypatch):
    ws = make(tmp_path, relu_task, fake_evaluator)
    ws.verify()
    ws.eval_config = replace(ws.eval_config, num_correct_trials=ws.eval_config.num_correct_trials + 1)
    assert ws.verify().answered_by is None and len(fake_evaluator.calls) == 2
    monkeypatch.setenv("CUDA_AGENT_SOME_SETTING", "1")   # the environment's settings are settings too
    assert ws.verify().answered_by is None and len(fake_evaluator.calls) == 3
    assert ws.verify().answered_by == "verify"
    other = type(fake_evaluator)()   # another evaluator's answers are its own
    ws.evaluator = other
    assert ws.verify().answered_by is None and len(other.calls) == 1
    task = replace(relu_task, code=relu_task.code.replace("64, 256", "64, 257"))
    solution = ws.snapshot()
    assert record_key(task, solution, "cpu", ws.eval_config) != record_key(relu_task, solution, "cpu", ws.eval_config)


def test_the_tools_never_answer_from_the_file_the_agent_can_write(tmp_path, relu_task, fake_evaluator):
    """The tools' answers are trusted (the session keeps them as verified candidates), so they come from
    memory only; the records on disk are the scripts', claims like results.jsonl."""
    ws = make(tmp_path, relu_task, fake_evaluator)
    key = record_key(ws.task, ws.snapshot(), ws.backend, ws.eval_config) + _evaluator_tag(fake_evaluator)
    forged = EvalResult(task="relu", backend="cpu", compiled=True, correct=True, kernel_ms=0.001, reward=3)
    RunRecords(ws.root / RECORDS_FILE).keep("profile", key, forged)
    assert RunRecords(ws.root / RECORDS_FILE).find("profile", key)[1].reward == 3
    assert ws.is_protected(RECORDS_FILE)   # out of reach of write and edit
    profiled = ws.profile()
    assert profiled.answered_by is None and profiled.result.kernel_ms == 1.0 and len(fake_evaluator.calls) == 1
    assert Workspace.open(ws.root, evaluator=fake_evaluator).verify().answered_by is None   # a fresh object: no records


def test_code_stamps_follow_size_and_time(tmp_path):
    from cuda_agent.agent.run_records import _installed, _stamp

    source = tmp_path / "evaluation.py"
    source.write_text("x = 1\n")
    before = _stamp([source], relative_to=tmp_path)
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 1))
    assert _stamp([source], relative_to=tmp_path) != before   # touched: other code
    assert set(_installed()) == {"torch", "package"} and all(_installed().values())


def test_the_disk_records_keep_the_newest_keys(tmp_path):
    records = RunRecords(tmp_path / "records.json")
    result = EvalResult(task="t", backend="cpu", compiled=True, correct=True)
    from cuda_agent.agent import run_records

    for i in range(run_records.MAX_KEYS + 3):
        records.keep("verify", f"k{i}", result)
    assert records.find("verify", "k0") is None and records.find("compile", f"k{run_records.MAX_KEYS + 2}")
    (tmp_path / "records.json").write_text("{not json")   # a damaged file is no record, and no crash
    assert records.find("verify", "k3") is None
    records.keep("verify", "k3", result)
    assert records.find("verify", "k3")[0] == "verify"


def test_a_session_step_on_unchanged_files(tmp_path, relu_task, fake_evaluator):
    session = KernelSession(relu_task, tmp_path / "ws", evaluator=fake_evaluator,
                            eval_config=EvalConfig(backend="cpu", cache_dir=tmp_path / "c"))
    session.reset()
    session.step([{"name": "write", "arguments": {"path": "kernels/relu_binding.cpp", "content": RELU_BINDING}},
                  {"name": "write", "arguments": {"path": "model_new.py", "content": RELU_MODEL_NEW}},
                  {"name": "verify", "arguments": {}}])
    step = session.step([{"name": "verify", "arguments": {}}])
    assert len(fake_evaluator.calls) == 1
    assert step.messages[0]["content"].endswith("(unchanged since the last verify: " + ANSWERED + ")")
    assert step.info.calls[0].ok and step.info.calls[0].command == "verify"
    assert [c.trusted for c in step.info.candidates] == [True]   # still the session's own result


# -- the scripts, for real (CPU backend) ----------------------------------------------------------

def run_script(ws: Workspace, command: str) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    proc = subprocess.run([str(ws.root / command)], cwd=ws.root, capture_output=True, text=True, timeout=600)
    return proc, time.perf_counter() - start


def test_scripts_answer_an_unchanged_workspace_from_their_records(tmp_path, relu_task, real_eval_config):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=real_eval_config)
    (ws.root / "kernels" / "relu_binding.cpp").write_text(RELU_BINDING)
    (ws.root / "model_new.py").write_text(RELU_MODEL_NEW)

    first, evaluated_s = run_script(ws, "verify")
    assert first.returncode == 0 and first.stdout.startswith("verify: PASSED"), first.stdout + first.stderr
    assert ANSWERED not in first.stdout and (ws.root / RECORDS_FILE).is_file()
    again, answered_s = run_script(ws, "verify")
    assert again.returncode == 0
    assert again.stdout == first.stdout.rstrip("\n") + "\n(unchanged since the last verify: " + ANSWERED + ")\n"
    assert answered_s < evaluated_s / 2, (answered_s, evaluated_s)
    compiled, _ = run_script(ws, "compile")   # the verify built and imported the same files
    assert compiled.returncode == 0 and compiled.stdout.startswith("compile: OK")
    assert "(unchanged since the last verify, which built these files too: " + ANSWERED in compiled.stdout
    records, _ = ws.read_records(0)   # each answer is still recorded, for a session's claims
    assert [r["command"] for r in records] == ["verify", "verify", "compile"]

    with open(ws.root / "model_new.py", "a") as fh:
        fh.write("\n")   # one byte
    edited, _ = run_script(ws, "verify")
    assert edited.returncode == 0 and edited.stdout.startswith("verify: PASSED") and ANSWERED not in edited.stdout
