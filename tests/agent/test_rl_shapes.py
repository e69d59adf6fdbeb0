"""The two trainers' shapes, served by a KernelSession with a few lines of glue (the RL adapters
are written on these; neither trainer is installed here).

- TRL 1.16 `GRPOTrainer(environment_factory=...)`: an environment object whose public methods are
  the tools (read through `inspect.getmembers` and transformers' `get_json_schema`), `reset(**row)`
  returning text for the prompt, `get_reward()` once per rollout.
- verl 0.9.1 `AgentLoopBase.run(sampling_params, **kwargs)`: a coroutine returning prompt and
  response token ids, a response mask (1 model, 0 tool tokens, the last one a model token),
  `reward_score` and `num_turns`; many run at once in one event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import json

import pytest

from cuda_agent.agent import KernelSession
from cuda_agent.agent.tools import AGENT_TOOLS
from cuda_agent.env.config import EvalConfig
from cuda_agent.tasks import Task

from .conftest import RELU_BINDING, RELU_MODEL_NEW, RELU_TASK
from .test_session import AsyncEvaluator

EVAL = EvalConfig(backend="cpu")


# -- TRL -------------------------------------------------------------------------------------------

class KernelEnvironment:
    """TRL's environment: the glue is `reset`, `_call_tool`, `get_reward` and one line per tool."""

    def __init__(self, root, evaluator):
        self.root, self.evaluator = root, evaluator

    def reset(self, **row) -> str:
        task = Task(name=row["name"], code=row["code"])
        self.session = KernelSession(task, self.root, eval_config=EVAL, evaluator=self.evaluator)
        return self.session.reset().messages[1]["content"]

    def _call_tool(self, name: str, arguments: dict) -> str:
        return self.session.step([{"name": name, "arguments": arguments}]).messages[0]["content"]

    def get_reward(self) -> float | None:
        return self.session.finish().reward


for _tool in AGENT_TOOLS:
    setattr(KernelEnvironment, _tool.name, _tool.method())


def test_trl_environment_shape(tmp_path, fake_evaluator):
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    env = KernelEnvironment(tmp_path / "ws", fake_evaluator)
    # what TRL exposes as tools: the public methods other than reset and get_reward
    methods = {name: m for name, m in inspect.getmembers(env, predicate=inspect.ismethod)
               if name not in ("reset", "get_reward") and not name.startswith("_")}
    assert set(methods) == {t.name for t in AGENT_TOOLS}
    for tool in AGENT_TOOLS:   # the schema transformers reads from the method is ours
        ours = tool.parameters
        schema = get_json_schema(methods[tool.name])["function"]
        params = schema["parameters"]
        assert schema["name"] == tool.name and schema["description"] == tool.description
        assert list(params["properties"]) == list(ours["properties"])
        assert params.get("required", []) == ours["required"]
        for key, prop in ours["properties"].items():
            assert params["properties"][key]["type"] == prop["type"]
            assert params["properties"][key]["description"] == prop.get("description", key.replace("_", " "))

    prompt = env.reset(name="relu", code=RELU_TASK)
    assert prompt.startswith("Task `relu` (cpu backend)")
    kernel = RELU_BINDING + "// kernel_ms=0.5\n"
    assert env.write(path="kernels/relu_binding.cpp", content=kernel).startswith("created")
    assert env.write(path="model_new.py", content=RELU_MODEL_NEW + "# v1\n").startswith("overwrote")
    # our checking and messages, whatever TRL passes
    assert env.read(path="model.py", lines=3) == \
        "Error: `read` has no parameter lines; its parameters are: path, offset, limit"
    edits = json.dumps([{"old_string": "# v1\n", "new_string": "# v2\n"}])   # double-encoded
    assert env.multi_edit(path="model_new.py", edits=edits) == "edited model_new.py: 1 edits, 1 replacements"
    assert env.profile().startswith("profile: correct")
    assert env.get_reward() == 3
    # pooled and reused: reset starts a new episode
    env.reset(name="relu", code=RELU_TASK)
    assert env.read(path="kernels") == "kernels/ is a folder:\n" and env.get_reward() == -1


# -- verl ------------------------------------------------------------------------------------------

def tokens(messages: list[dict]) -> list[int]:
    return list(json.dumps(messages).encode())


class ScriptedServer:
    """Stands in for verl's server manager: per request, the next scripted assistant message."""

    def __init__(self, scripts: dict[str, list[dict]]):
        self.scripts = scripts

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict):
        await asyncio.sleep(0)
        message = self.scripts[request_id].pop(0)
        return tokens([message]), message


class KernelAgentLoop:
    """verl's agent loop shape: `run` is the glue."""

    def __init__(self, server, evaluator, root):
        self.server, self.evaluator, self.root = server, evaluator, root

    async def run(self, sampling_params: dict, **kwargs) -> dict:
        session = KernelSession(kwargs["task"], self.root / kwargs["request_id"], eval_config=EVAL,
                                evaluator=self.evaluator)
        opening = await session.areset()
        prompt_ids, response_ids, mask = tokens(opening.messages), [], []
        while True:
            ids, message = await self.server.generate(kwargs["request_id"], prompt_ids + response_ids, sampling_params)
            response_ids += ids
            mask += [1] * len(ids)
            step = await session.astep(message.get("tool_calls") or [], assistant=message)
            if step.done:   # the last token stays a model token
                break
            ids = tokens(step.messages)
            response_ids += ids
            mask += [0] * len(ids)
        outcome = await session.afinish()
        return {"prompt_ids": prompt_ids, "response_ids": response_ids, "response_mask": mask,
                "reward_score": outcome.reward, "num_turns": len(outcome.trajectory.messages)}


def call(name: str, **arguments) -> dict:
    return {"id": f"c-{name}", "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


def test_verl_agent_loop_shape(tmp_path, relu_task, fake_evaluator):
    def script(i: int) -> list[dict]:
        kernel = RELU_BINDING + f"// kernel_ms={2.5 if i % 2 else 0.5}\n"   # odd ones are slower than eager
        return [{"role": "assistant", "content": "", "tool_calls": [
                    call("write", path="kernels/relu_binding.cpp", content=kernel),
                    call("write", path="model_new.py", content=RELU_MODEL_NEW)]},
                {"role": "assistant", "content": "", "tool_calls": [call("verify")]},
                {"role": "assistant", "content": "done", "tool_calls": [call("finish")]}]

    server = ScriptedServer({f"r{i}": script(i) for i in range(8)})
    loop = KernelAgentLoop(server, AsyncEvaluator(fake_evaluator), tmp_path)

    async def main():
        return await asyncio.gather(*(loop.run({"temperature": 1.0}, task=relu_task, request_id=f"r{i}",
                                               unknown_kwarg=True) for i in range(8)))

    outputs = asyncio.run(main())
    for i, out in enumerate(outputs):
        assert len(out["response_ids"]) == len(out["response_mask"]) and out["response_mask"][-1] == 1
        assert 0 in out["response_mask"] and out["num_turns"] == 2 + 3 + 4
        assert out["reward_score"] == (1 if i % 2 else 3)
