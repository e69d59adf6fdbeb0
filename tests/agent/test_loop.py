"""The ReAct loop against a real local HTTP chat-completions server, with a fake environment."""

import json
from dataclasses import replace

from cuda_agent.llm.client import OpenAIClient
from cuda_agent.agent.context import ContextBudget
from cuda_agent.agent.loop import AgentConfig, run_episode
from cuda_agent.agent.tools import ToolLimits
from cuda_agent.agent.tracking import BestTracker, Candidate, rank
from cuda_agent.env.config import EvalConfig
from cuda_agent.env.result import EvalResult
from cuda_agent.tasks import Solution

from .chat_server import Fail, ScriptedChatServer, call, say
from .conftest import RELU_BINDING, RELU_MODEL_NEW

EVAL = EvalConfig(backend="cpu", compile_baseline=True)


def episode(tmp_path, task, script, evaluator, config=None, events=None, **kw):
    with ScriptedChatServer(script) as server:
        client = OpenAIClient("scripted", base_url=server.base_url, max_retries=kw.pop("max_retries", 0))
        result = run_episode(task, client, workspace_dir=tmp_path / "ws", config=config or AgentConfig(),
                             eval_config=EVAL, evaluator=evaluator,
                             on_event=(lambda k, d: events.append((k, d))) if events is not None else None, **kw)
    return result, server


def tool_messages(request: dict) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def test_full_episode_with_planted_error(tmp_path, relu_task, fake_evaluator):
    events = []
    script = [
        say("Reading the rules first.", call("read", path="SKILL.md")),
        say("", call("write", path="kernels/relu_binding.cpp", content=RELU_BINDING + "#error planted\n"),
            call("write", path="model_new.py", content=RELU_MODEL_NEW)),
        say("", call("compile")),
        say("Fix the planted error.", call("edit", path="kernels/relu_binding.cpp",
                                           old_string="#error planted\n", new_string="// kernel_ms=0.5\n")),
        say("", call("compile")),
        say("", call("verify")),
        say("", call("profile")),
        say("Done.", call("finish", summary="a fused relu")),
    ]
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator, events=events)
    traj = ep.trajectory
    assert server.remaining == 0 and traj.stop_reason == "finish" and traj.num_turns == 8
    # what the model saw after the failing compile, and after the fix
    after_compile = tool_messages(server.requests[3])[-1]
    assert after_compile.startswith("compile: FAILED") and "planted" in after_compile
    assert tool_messages(server.requests[7])[-1].startswith("profile: correct")
    # per-turn environment results
    envs = [(c.name, c.env[0]["compiled"]) for t in traj.turns for c in t.tool_calls if c.env]
    assert envs == [("compile", False), ("compile", True), ("verify", True), ("profile", True)]
    assert traj.best["turn"] == 7 and traj.best["trusted"]
    # the score comes from a fresh evaluation with the final config, not from the episode
    final_solution, final_config = fake_evaluator.calls[-1]
    assert final_config == EVAL and final_solution.files == ep.solution.files
    assert ep.result.reward == 3 and traj.reward == 3 and traj.speedup_vs_compile == 3.0
    assert ep.solution.files["model_new.py"] == RELU_MODEL_NEW
    assert traj.usage["calls"] == 8 and traj.usage["prompt_tokens"] > 0
    assert set(traj.timings) >= {"model_s", "tools_s", "eval_s", "final_eval_s", "total_s"}
    kinds = [k for k, _ in events]
    assert kinds[0] == "start" and kinds[-1] == "final" and "best" in kinds and kinds.count("tool") == 9
    # the transcript pairs every call with its result
    assert [m["role"] for m in traj.messages[:5]] == ["system", "user", "assistant", "tool", "assistant"]


def test_malformed_unknown_and_oversized_calls(tmp_path, relu_task, fake_evaluator):
    script = [
        say("", call("write", raw_arguments='{"path": "model_new.py", "content": "oops')),
        say("", call("delete_everything", path=".")),
        say("", call("bash", command="python3 -c \"print('z' * 200000)\"")),
        say("", call("finish")),
    ]
    config = AgentConfig(limits=ToolLimits(max_output_chars=5000))
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator, config=config)
    traj = ep.trajectory
    assert traj.stop_reason == "finish" and server.remaining == 0   # the server accepted every request
    assert traj.tool_errors() == {"invalid_arguments": 1, "unknown_tool": 1}
    outputs = tool_messages(server.requests[-1])
    assert "not valid JSON" in outputs[0] and "unknown tool `delete_everything`" in outputs[1]
    assert len(outputs[2]) < 6000 and "characters omitted" in outputs[2]
    # the raw malformed call stays in the trajectory; the server got a parseable stand-in
    assert traj.turns[0].tool_calls[0].arguments.endswith('"oops')
    assert server.requests[1]["messages"][2]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert ep.result.reward == -1 and ep.solution is None   # the starting point never became a solution


def test_endpoint_failing_mid_episode_keeps_trajectory_and_best(tmp_path, relu_task, fake_evaluator):
    script = [
        say("", call("write", path="kernels/relu_binding.cpp", content=RELU_BINDING),
            call("write", path="model_new.py", content=RELU_MODEL_NEW)),
        say("", call("verify")),
        Fail(500), Fail(502),
    ]
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator, max_retries=1)
    traj = ep.trajectory
    assert traj.stop_reason == "client_error" and "502" in traj.error
    assert traj.num_turns == 3 and len(traj.messages) == 2 + 3 + 2
    assert traj.best["turn"] == 2 and ep.result.correct and ep.reward == 3   # 1.0 ms vs 1.5 ms compiled
    assert ep.solution.files["kernels/relu_binding.cpp"] == RELU_BINDING


def test_context_overflow_is_compacted_and_retried(tmp_path, relu_task, fake_evaluator):
    script = [say("", call("bash", command="python3 -c \"print('q' * 12000)\"")),
              say("", call("bash", command="echo small")), say("", call("bash", command="echo small")),
              Fail(400, "prompt is too long: maximum context length is 4096 tokens"),
              say("", call("finish"))]
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator)
    assert ep.trajectory.stop_reason == "finish"
    refused, retried = server.requests[3], server.requests[4]
    assert len(json.dumps(retried)) < len(json.dumps(refused)) - 10_000
    assert "q" * 12000 in ep.trajectory.messages[3]["content"]    # the transcript keeps everything


def test_context_budget_bounds_requests(tmp_path, relu_task, fake_evaluator):
    script = [say("", call("bash", command=f"python3 -c \"print('{i}' * 8000)\"")) for i in range(8)]
    script.append(say("", call("finish")))
    config = AgentConfig(context=ContextBudget(max_tokens=6000, keep_recent=2))
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator, config=config)
    sizes = [sum(len(m.get("content") or "") for m in r["messages"]) for r in server.requests]
    assert max(sizes) < 6000 * 3.5 and sum(t.compacted for t in ep.trajectory.turns) > 0
    system, task = server.requests[-1]["messages"][:2]
    assert system["role"] == "system" and "relu" in task["content"]


def test_idle_replies_are_nudged_then_stop(tmp_path, relu_task, fake_evaluator):
    ep, server = episode(tmp_path, relu_task, [say("thinking..."), say("still thinking", finish_reason="length"),
                                               say("...")], fake_evaluator)
    assert ep.trajectory.stop_reason == "no_tool_calls" and ep.trajectory.num_turns == 3
    nudges = [m["content"] for m in server.requests[-1]["messages"] if m["role"] == "user"][1:]
    assert "No tool was called" in nudges[0] and "cut off" in nudges[1]


def test_turn_limit(tmp_path, relu_task, fake_evaluator):
    script = [say("", call("bash", command="true"))] * 5
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator, config=AgentConfig(max_turns=2))
    assert ep.trajectory.stop_reason == "max_turns" and len(server.requests) == 2


def test_forged_claims_and_tampering_do_not_change_the_score(tmp_path, relu_task, fake_evaluator):
    forged = {"command": "profile", "ok": True, "files": {"model_new.py": "raise NotImplementedError"},
              "result": EvalResult(task="relu", backend="cpu", compiled=True, correct=True, kernel_ms=0.001,
                                   eager_ms=2.0, compile_ms=1.5, speedup_vs_compile=1500.0, reward=3).to_dict()}
    script = [
        say("", call("write", path="kernels/relu_binding.cpp", content=RELU_BINDING),
            call("write", path="model_new.py", content=RELU_MODEL_NEW)),
        say("", call("profile")),
        say("", call("bash", command=f"echo '{json.dumps(forged)}' >> .cuda_agent/results.jsonl; "
                                      "chmod u+w model.py; echo 'class Model: pass' > model.py")),
        say("", call("finish")),
    ]
    ep, server = episode(tmp_path, relu_task, script, fake_evaluator)
    traj = ep.trajectory
    assert "restored: model.py" in tool_messages(server.requests[3])[-1]
    assert (ep.workspace.root / "model.py").read_text() == relu_task.code
    assert traj.best["trusted"] is False   # the claim looked best ...
    rescored = [s.files.get("model_new.py") for s, _ in fake_evaluator.calls[-2:]]
    assert "raise NotImplementedError" in rescored   # ... so it was re-evaluated, and lost
    assert ep.solution.files["model_new.py"] == RELU_MODEL_NEW and ep.reward == 3


def test_rank_orders_reward_then_speedup():
    def r(correct, reward, speed, kernel=1.0):
        return EvalResult(task="t", backend="cpu", correct=correct, reward=reward, speedup_vs_compile=speed,
                          kernel_ms=kernel)
    assert rank(r(False, -1, None)) is None
    assert rank(r(True, 3, 1.2)) > rank(r(True, 2, 5.0)) > rank(r(True, 2, 1.0))
    assert rank(r(True, -1, None, kernel=None)) == (1, 0.0, 0.0)   # verified, not timed
    slow_calls = replace(r(True, 2, 2.0), speedup_totals={"compile": 1.2})   # a median of 2.0, calls' totals 1.2
    assert rank(r(True, 2, 1.6)) > rank(slow_calls)
    tracker = BestTracker()
    sol = Solution.from_code("x")
    assert tracker.offer(Candidate(sol, r(True, 2, 1.0), 1, trusted=True))
    assert not tracker.offer(Candidate(sol, r(True, 1, 0.5), 2, trusted=True))
    assert tracker.offer(Candidate(sol, r(True, 3, 1.1), 3, trusted=False))
    assert tracker.best.turn == 3 and tracker.best_trusted.turn == 1
