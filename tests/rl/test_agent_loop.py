"""The `cuda_agent` verl agent loop, run by verl's own AgentLoopWorker (no Ray) on a scripted token
server (`verl_worker.py`).

What is checked is what PPO consumes: the token stream (what the server saw each turn), the loss
mask (model tokens 1, tool output 0), rollout logprobs (0.0 on tool tokens), the outcome reward on
the last response token (a model token), the trajectory record and the per-trajectory workspace.
"""

import json

import pytest

pytest.importorskip("verl")

from cuda_agent.env.result import EvalError, EvalResult  # noqa: E402
from cuda_agent.rl.episode import EpisodeSettings  # noqa: E402

from .conftest import SESSION  # noqa: E402
from .verl_worker import LOGPROB, ScriptServer, call, run_v0, setup  # noqa: E402


def judge(task, solution, config):
    """Evaluator stand-in: reward 3 for a model_new.py that says FAST, a failure otherwise."""
    if "FAST" in solution.files.get("model_new.py", ""):
        return EvalResult(task=task.name, backend="cpu", compiled=True, correct=True, reward=3)
    return EvalResult(task=task.name, backend="cpu", error=EvalError("verify", "wrong"))


def broken(task, solution, config):
    raise RuntimeError("evaluation service down")


def judge_factory():
    return judge


def broken_factory():
    return broken


def episode(tmp_path, tiny_model, replies, evaluator="tests.rl.test_agent_loop:judge_factory", response_length=2048):
    """One trajectory through verl's v0 worker, with the stage's settings file."""
    settings = EpisodeSettings(eval={"backend": "cpu"}, evaluator=evaluator, session=SESSION,
                               workspace_root=str(tmp_path / "ws"), trajectories=str(tmp_path / "traj.jsonl"))
    s = setup(tmp_path, tiny_model, settings, n=1, response_length=response_length, max_turns=5)
    server = ScriptServer(s.tokenizer, replies)
    out, _ = run_v0(s, server, n=1)
    return out, server, s.tokenizer


def response(out):
    b = out.batch
    n = int(b["attention_mask"][0, b["prompts"].shape[1]:].sum())
    return (b["responses"][0, :n].tolist(), b["response_mask"][0, :n].tolist(),
            b["rollout_log_probs"][0, :n].tolist(), b["rm_scores"][0])


def test_episode_tokens_mask_logprobs_and_reward(tmp_path, tiny_model):
    replies = ['Writing it.' + call("write", path="model_new.py", content="FAST"), call("finish", summary="done")]
    out, server, tok = episode(tmp_path, tiny_model, replies)
    ids, mask, logprobs, rm = response(out)
    # Token-in/token-out: turn 2 continues exactly from turn 1's prompt and reply, plus the tool output.
    (p1, s1), (p2, _) = server.prompts
    reply1 = tok.encode(replies[0], add_special_tokens=False) + [tok.eos_token_id]
    assert p2[: len(p1) + len(reply1)] == p1 + reply1 and s1["max_tokens"] == 2048
    tool_text = tok.decode([t for t, m in zip(ids, mask) if m == 0])
    assert "overwrote model_new.py" in tool_text and "<tool_call>" not in tool_text
    model_tokens = [t for t, m in zip(ids, mask) if m == 1]
    assert model_tokens == reply1 + tok.encode(replies[1], add_special_tokens=False) + [tok.eos_token_id]
    assert all(lp == (LOGPROB if m else 0.0) for lp, m in zip(logprobs, mask))
    # The outcome reward: on the last response token, which is the model's.
    assert mask[-1] == 1 and float(rm[len(ids) - 1]) == 3.0 and float(rm.sum()) == 3.0
    assert out.non_tensor_batch["stop_reason"][0] == "finish" and not out.non_tensor_batch["skipped"][0]
    record = json.loads((tmp_path / "traj.jsonl").read_text())
    assert record["reward"] == 3 and record["turns"][0]["tool_calls"][0]["name"] == "write"
    assert not any((tmp_path / "ws").iterdir())   # the trajectory's workspace is gone


def test_tool_output_that_does_not_fit_is_not_appended(tmp_path, tiny_model):
    replies = [call("write", path="model_new.py", content="FAST"), call("finish")]
    probe, _, tok = episode(tmp_path / "a", tiny_model, replies)
    first = len(tok.encode(replies[0], add_special_tokens=False)) + 1
    out, server, _ = episode(tmp_path / "b", tiny_model, replies, response_length=first + 5)
    ids, mask, _, rm = response(out)
    assert len(server.prompts) == 1 and mask == [1] * first   # ends on the model's own tokens
    assert float(rm[first - 1]) == 3.0 and out.non_tensor_batch["stop_reason"][0] == "response_length"


def test_infrastructure_failure_trains_nothing(tmp_path, tiny_model):
    out, _, _ = episode(tmp_path, tiny_model, [call("finish")], evaluator="tests.rl.test_agent_loop:broken_factory")
    ids, mask, _, rm = response(out)
    assert ids and sum(mask) == 0 and float(rm.abs().sum()) == 0.0
    assert out.non_tensor_batch["skipped"][0]
