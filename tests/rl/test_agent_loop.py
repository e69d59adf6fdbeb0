"""The `cuda_agent` verl agent loop, run by verl's own AgentLoopWorker (no Ray) on a scripted token server.

What is checked is what PPO consumes: the token stream (what the server saw each turn), the loss
mask (model tokens 1, tool output 0), rollout logprobs (0.0 on tool tokens), the outcome reward on
the last response token (a model token), the trajectory record and the per-trajectory workspace.
"""

import asyncio
import json

import pytest

pytest.importorskip("verl")

from cuda_agent.env.result import EvalError, EvalResult  # noqa: E402
from cuda_agent.rl.data import build  # noqa: E402
from cuda_agent.rl.episode import EpisodeSettings  # noqa: E402
from cuda_agent.rl.stages import compose  # noqa: E402
from cuda_agent.tasks import Task  # noqa: E402

from .conftest import SESSION  # noqa: E402
from .test_data import CODE  # noqa: E402

LOGPROB = -0.25


def call(name, **arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


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


class ScriptedServer:
    """verl's LLMServerClient.generate surface: token ids in, the next scripted reply's tokens out."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts = tokenizer, list(replies), []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append((list(prompt_ids), dict(sampling_params)))
        ids = self.tokenizer.encode(self.replies.pop(0), add_special_tokens=False) + [self.tokenizer.eos_token_id]
        ids = ids[: sampling_params.get("max_tokens", len(ids))]
        return TokenOutput(token_ids=ids, log_probs=[LOGPROB] * len(ids))


def episode(tmp_path, tiny_model, replies, evaluator="tests.rl.test_agent_loop:judge_factory", response_length=2048):
    from transformers import AutoTokenizer
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    build([Task(name="t0", code=CODE.format(k=2))], tmp_path / "data", val_fraction=0)
    settings = EpisodeSettings(eval={"backend": "cpu"}, evaluator=evaluator, session=SESSION,
                               workspace_root=str(tmp_path / "ws"), trajectories=str(tmp_path / "traj.jsonl"))
    settings.dump(tmp_path / "episode.json")
    (tmp_path / "loops.yaml").write_text("- name: cuda_agent\n  _target_: cuda_agent.rl.agent_loop.KernelAgentLoop\n"
                                         f"  settings: {tmp_path / 'episode.json'}\n")
    config = compose("ppo_trainer", [
        f"actor_rollout_ref.model.path={tiny_model}", "actor_rollout_ref.rollout.name=vllm",
        "data.max_prompt_length=4096", f"data.max_response_length={response_length}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={tmp_path / 'loops.yaml'}",
        "actor_rollout_ref.rollout.agent.default_agent_loop=cuda_agent",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=5"])
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    server = ScriptedServer(tokenizer, replies)
    worker = AgentLoopWorker(config, server)
    dataset = RLHFDataset(data_files=[str(tmp_path / "data" / "train.parquet")], tokenizer=tokenizer,
                          config=config.data)
    batch = DataProto.from_single_dict(collate_fn([dataset[0]]))
    out = asyncio.run(worker.generate_sequences(batch))
    return out, server, tokenizer


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
