"""KernelSession on its own: reset, step, finish, with the fake evaluator and a real workspace."""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from cuda_agent.agent import KernelSession, SessionError, SessionLimits
from cuda_agent.agent.prompts import NUDGE, NUDGE_TRUNCATED, SYSTEM_PROMPT
from cuda_agent.agent.tools import AGENT_TOOLS
from cuda_agent.agent.workspace import Workspace
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult

from .conftest import RELU_BINDING, RELU_MODEL_NEW

EVAL = EvalConfig(backend="cpu")


def new_session(tmp_path, task, evaluator, **kw) -> KernelSession:
    return KernelSession(task, tmp_path / "ws", eval_config=EVAL, evaluator=evaluator, **kw)


def write_solution(kernel_ms: float = 0.5) -> list[dict]:
    return [{"name": "write", "arguments": {"path": "kernels/relu_binding.cpp",
                                            "content": RELU_BINDING + f"// kernel_ms={kernel_ms}\n"}},
            {"name": "write", "arguments": {"path": "model_new.py", "content": RELU_MODEL_NEW}}]


def test_reset_gives_the_opening_and_a_fresh_workspace(tmp_path, relu_task, fake_evaluator):
    (tmp_path / "ws").mkdir()
    session = new_session(tmp_path, relu_task, fake_evaluator)
    opening = session.reset()
    system, user = opening.messages
    assert system == {"role": "system", "content": SYSTEM_PROMPT}
    assert user["role"] == "user" and "Task `relu` (cpu backend)" in user["content"]
    assert relu_task.code.strip() in user["content"]
    assert [t["function"]["name"] for t in opening.tools] == [t.name for t in AGENT_TOOLS]
    assert (session.workspace.root / "model.py").read_text() == relu_task.code
    assert session.trajectory.messages == opening.messages and not session.done
    (session.workspace.root / "kernels" / "old.cpp").write_text("// an earlier episode")
    session.reset()   # start over: nothing of the last episode is left
    assert not (session.workspace.root / "kernels" / "old.cpp").exists() and session.trajectory.turns == []


def test_steps_run_calls_in_both_formats_and_track_candidates(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator)
    session.reset()
    step = session.step(write_solution())   # name + arguments (a dict): ids are made up
    assert [m["tool_call_id"] for m in step.messages] == ["call_1_0", "call_1_1"]
    assert step.messages[0] == {"role": "tool", "tool_call_id": "call_1_0",
                                "content": "created kernels/relu_binding.cpp (13 lines)"}
    assert not step.done and step.info.turn == 1 and step.info.candidates == [] and not step.info.new_best
    recorded = session.trajectory.messages[2]   # the assistant message that carried the calls
    assert recorded["role"] == "assistant" and json.loads(recorded["tool_calls"][1]["function"]["arguments"]) == \
        {"path": "model_new.py", "content": RELU_MODEL_NEW}

    openai_call = {"id": "abc", "type": "function", "function": {"name": "profile", "arguments": "{}"}}
    assistant = {"role": "assistant", "content": "profiling", "tool_calls": [openai_call]}
    step = session.step([openai_call], assistant=assistant)
    assert step.messages[0]["tool_call_id"] == "abc" and step.messages[0]["content"].startswith("profile: correct")
    (candidate,) = step.info.candidates
    assert candidate.trusted and candidate.turn == 2 and candidate.result.reward == 3 and step.info.new_best
    assert step.info.eval_seconds > 0 and step.info.calls[0].command == "profile"
    assert session.trajectory.messages[5] == assistant and session.trajectory.best["turn"] == 2

    step = session.step([{"name": "finish", "arguments": {"summary": "relu"}}])
    assert step.done and step.stop_reason == "finish" and session.done
    with pytest.raises(SessionError, match="over"):
        session.step([{"name": "read", "arguments": {"path": "model.py"}}])
    outcome = session.finish()
    assert outcome.reward == 3 and outcome.stop_reason == "finish" and outcome.infra_error is None
    assert outcome.solution.files["model_new.py"] == RELU_MODEL_NEW and outcome.result.correct
    assert outcome.trajectory is session.trajectory and outcome.trajectory.num_turns == 3
    assert session.finish() is outcome   # a second call changes nothing


def test_restoration_and_claims_are_reported(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator)
    session.reset()
    forged = {"command": "verify", "ok": True, "files": {"model_new.py": "raise NotImplementedError"},
              "result": EvalResult(task="relu", backend="cpu", compiled=True, correct=True).to_dict()}
    command = f"chmod u+w model.py; echo x > model.py; echo '{json.dumps(forged)}' >> .cuda_agent/results.jsonl"
    step = session.step([{"name": "bash", "arguments": {"command": command}}])
    assert step.info.restored == ["model.py"] and "restored: model.py" in step.messages[0]["content"]
    (claim,) = step.info.candidates
    assert not claim.trusted and claim.solution.files == forged["files"]
    assert step.info.calls[0].command == "verify" and session.tracker.best_trusted is None
    outcome = session.finish()   # the claim is re-evaluated and fails; the stub state fails too
    assert session.trajectory.stop_reason == "stopped" and outcome.reward == -1 and outcome.solution is None


def test_replies_without_calls_are_nudged_then_end(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator, limits=SessionLimits(max_idle_turns=3))
    session.reset()
    assert session.step([], assistant={"role": "assistant", "content": "hmm"}).messages == \
        [{"role": "user", "content": NUDGE}]
    session.note_model_turn(seconds=1.5, prompt_tokens=100, completion_tokens=4096, finish_reason="length")
    step = session.step([], assistant={"role": "assistant", "content": "I was cut"})
    assert step.messages == [{"role": "user", "content": NUDGE_TRUNCATED}] and not step.done
    step = session.step([])
    assert step.done and step.stop_reason == "no_tool_calls" and step.messages == []
    traj = session.trajectory
    assert [t.finish_reason for t in traj.turns] == [None, "length", None]
    assert traj.usage == {"prompt_tokens": 100, "completion_tokens": 4096, "calls": 1}
    assert session.timings["model_s"] == 1.5


def test_turn_and_time_limits(tmp_path, relu_task, fake_evaluator, monkeypatch):
    session = new_session(tmp_path, relu_task, fake_evaluator, limits=SessionLimits(max_turns=2))
    session.reset()
    assert not session.step([{"name": "todo", "arguments": {"todos": []}}]).done
    assert session.step([{"name": "todo", "arguments": {"todos": []}}]).stop_reason == "max_turns"

    now = [1000.0]   # a stand-in clock, moved by hand
    monkeypatch.setattr(time, "perf_counter", lambda: now[0])
    session = new_session(tmp_path, relu_task, fake_evaluator, limits=SessionLimits(max_seconds=250))
    session.reset()
    now[0] += 200
    assert session.step([{"name": "todo", "arguments": {"todos": []}}]).stop_reason is None
    now[0] += 100
    assert session.step([{"name": "todo", "arguments": {"todos": []}}]).stop_reason == "time_limit"


def test_order_is_enforced(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator)
    with pytest.raises(SessionError, match="reset"):
        session.step([])
    with pytest.raises(SessionError, match="reset"):
        session.finish()
    with pytest.raises(ValueError, match="unknown tool 'rm'"):
        new_session(tmp_path, relu_task, fake_evaluator, tools=["bash", "rm"])


def test_chosen_tools_and_unknown_calls(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator, tools=["read", "submit"])
    assert [t["function"]["name"] for t in session.reset().tools] == ["read", "submit"]
    step = session.step([{"name": "bash", "arguments": {"command": "ls"}}])
    assert step.messages[0]["content"] == "Error: unknown tool `bash`. Available tools: read, submit."
    assert step.info.calls[0].error == "unknown_tool"
    assert session.step([{"name": "submit", "arguments": "{}"}]).stop_reason == "finish"


# -- infrastructure failures are not the policy's ----------------------------------------------------

class CrashingFinal:
    """The fake evaluator, except that the final configuration (timing with 7 iterations) crashes."""

    def __init__(self, evaluator):
        self.evaluator = evaluator

    def __call__(self, task, solution, config):
        if config.iters == 7:
            raise ConnectionError("evaluation service unreachable")
        return self.evaluator(task, solution, config)


def test_a_crashing_final_evaluation_leaves_no_reward(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, CrashingFinal(fake_evaluator),
                          final_eval_config=EvalConfig(backend="cpu", iters=7))
    session.reset()
    session.step(write_solution())
    assert session.step([{"name": "profile", "arguments": {}}]).info.new_best   # the episode's own runs work
    outcome = session.finish()
    traj = outcome.trajectory
    assert outcome.reward is None and traj.reward is None and outcome.solution is None
    assert "evaluation service unreachable" in outcome.infra_error and traj.infra_error == outcome.infra_error
    assert traj.final["error"]["phase"] == "internal"


def test_an_endpoint_failure_before_any_verified_work_leaves_no_reward(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator)
    session.reset()
    session.note_model_turn(failed=True)
    outcome = session.finish("client_error", "endpoint returned 502: bad gateway")
    assert outcome.reward is None and outcome.infra_error == "client_error: endpoint returned 502: bad gateway"
    assert outcome.trajectory.num_turns == 1 and outcome.trajectory.usage["calls"] == 0
    # the same failure after verified work: the clean score stands (see test_loop)
    session = new_session(tmp_path, relu_task, fake_evaluator)
    session.reset()
    session.step(write_solution())
    outcome = session.finish("client_error", "endpoint returned 502: bad gateway")
    assert outcome.reward == 3 and outcome.infra_error is None


def test_unscored_finish_evaluates_nothing(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, fake_evaluator)
    session.reset()
    session.step(write_solution())
    calls = len(fake_evaluator.calls)
    outcome = session.finish("stopped", unscored="the driver could not wait")
    assert outcome.reward is None and outcome.infra_error == "not scored: the driver could not wait"
    assert len(fake_evaluator.calls) == calls and outcome.trajectory.final is None


# -- evaluators and workspaces ----------------------------------------------------------------------

class AsyncEvaluator:
    """An EvalPool-like evaluator: `async def evaluate(task, solution, config)`."""

    def __init__(self, evaluator):
        self.evaluator = evaluator

    async def evaluate(self, task, solution, config=None):
        await asyncio.sleep(0)
        return self.evaluator(task, solution, config)


def test_an_async_evaluator_serves_sync_and_async_drivers(tmp_path, relu_task, fake_evaluator):
    session = new_session(tmp_path, relu_task, AsyncEvaluator(fake_evaluator))
    session.reset()
    session.step(write_solution())
    assert session.step([{"name": "verify", "arguments": {}}]).messages[0]["content"].startswith("verify: PASSED")

    async def drive():
        other = KernelSession(relu_task, tmp_path / "ws2", eval_config=EVAL, evaluator=AsyncEvaluator(fake_evaluator))
        await other.areset()
        await other.astep(write_solution(0.25))
        step = await other.astep([{"name": "profile", "arguments": {}}])
        return step, await other.afinish()

    step, outcome = asyncio.run(drive())
    assert step.info.new_best and outcome.reward == 3 and outcome.result.kernel_ms == 0.25
    assert session.finish().result.kernel_ms == 0.5   # the sync session, untouched by the other


def test_attach_keeps_the_workspace_and_ignores_earlier_records(tmp_path, relu_task, fake_evaluator):
    ws = Workspace.create(relu_task, tmp_path / "ws", eval_config=EVAL, evaluator=fake_evaluator)
    (ws.root / "model_new.py").write_text(RELU_MODEL_NEW)
    ws.record(ws.run("verify"))   # someone ran ./verify before the session started
    session = KernelSession.attach(ws, evaluator=fake_evaluator)
    session.reset()
    assert (ws.root / "model_new.py").read_text() == RELU_MODEL_NEW
    step = session.step([{"name": "read", "arguments": {"path": "model_new.py", "limit": 1}}])
    assert step.info.candidates == [] and session.tracker.best is None
