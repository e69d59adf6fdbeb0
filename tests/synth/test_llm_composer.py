"""The optional LLM composer, against a scripted OpenAI-compatible server on 127.0.0.1 (real HTTP
through the same client as the agent's, no model)."""

from __future__ import annotations

import os
import random

import pytest

from cuda_agent.llm import make_client
from cuda_agent.synth.compose import ComposeError, render_candidate
from cuda_agent.synth.llm import MAX_TOKENS, TEMPERATURE, LLMComposer, extract_code, uses
from tests.agent.chat_server import Fail, ScriptedChatServer, say

GOOD = '''Here you go:
```python
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)

    def forward(self, x):
        return F.gelu(self.conv(x))


batch_size = 4


def get_inputs():
    return [torch.randn(batch_size, 3, 16, 16)]


def get_init_inputs():
    return []
```'''


def composer(catalog, server, ops=("nn.Conv2d", "F.gelu")):
    c = LLMComposer.from_env(catalog, "fake-model", server.base_url)
    c.pick_ops = lambda k, rng: list(ops)
    return c


def test_accepts_a_valid_program_and_prompts_with_the_ops(catalog):
    with ScriptedChatServer([say(GOOD)]) as server:
        code, ops = composer(catalog, server).compose(2, random.Random(0))
    assert ops == ["nn.Conv2d", "F.gelu"] and "class Model" in code
    [body] = server.requests
    prompt = body["messages"][1]["content"]
    assert "nn.Conv2d(in_channels, out_channels, kernel_size" in prompt and "F.gelu" in prompt
    assert body["model"] == "fake-model" and "tools" not in body
    assert (body["temperature"], body["max_tokens"]) == (TEMPERATURE, MAX_TOKENS)
    assert body["seed"] == random.Random(0).randrange(2 ** 31)   # the candidate's own: the same run asks the same
    rescaled = render_candidate({"kind": "code", "code": code}, None, batch=64)
    assert "batch_size = 64" in rescaled


def test_model_and_endpoint_from_the_environment(catalog, monkeypatch):
    monkeypatch.delenv("CUDA_AGENT_SYNTH_MODEL", raising=False)
    with pytest.raises(ValueError, match="--llm-model"):
        LLMComposer.from_env(catalog)
    with ScriptedChatServer([say(GOOD)]) as server:
        monkeypatch.setenv("CUDA_AGENT_SYNTH_MODEL", "env-model")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        c = LLMComposer.from_env(catalog)
        c.pick_ops = lambda k, rng: ["nn.Conv2d", "F.gelu"]
        c.compose(2, random.Random(1))
    assert [b["model"] for b in server.requests] == ["env-model"]


def test_a_failing_endpoint_drops_the_candidate(catalog):
    with ScriptedChatServer([Fail(503, "model overloaded")]) as server:
        c = LLMComposer(make_client("m", base_url=server.base_url, retries=0), catalog)
        c.pick_ops = lambda k, rng: ["nn.Conv2d", "F.gelu"]
        with pytest.raises(ComposeError, match="LLM call failed: ClientError: endpoint returned 503: model overloaded"):
            c.compose(2, random.Random(0))


@pytest.mark.parametrize("reply, message", [
    (GOOD.replace("F.gelu(self.conv(x))", "torch.relu(self.conv(x))"), "does not use F.gelu"),
    (GOOD.replace("nn.Conv2d(3, 8, 3)", "nn.Conv2d(5, 8, 3)"), "shape check failed"),
    (GOOD.replace("batch_size = 4", "batch_size = int('4')"), "batch_size"),
    ("no code at all", "syntax error"),
])
def test_rejects_what_the_rules_would_not_build(catalog, reply, message):
    with ScriptedChatServer([say(reply)]) as server, pytest.raises(ComposeError, match=message):
        composer(catalog, server).compose(2, random.Random(0))


def test_helpers():
    assert extract_code("```python\nx = 1\n```") == "x = 1\n"
    assert uses("import torch.nn.functional as F\nF.gelu(x)", "F.gelu")
    assert uses("torch.nn.functional.gelu(x)", "F.gelu")
    assert not uses("F.relu(x)", "F.gelu")


# -- the shape check runs the model's code in a child process, never in the synthesis process ----------


def recording(reply: str, record, line: str = "") -> str:
    """`reply` whose program first appends the pid of the process running it to `record`, then runs `line`."""
    first = f"import os; open({str(record)!r}, 'a').write(f'{{os.getpid()}}\\n')\n{line}\n"
    return reply.replace("```python\n", "```python\n" + first, 1)


def ran_in(record) -> list[str]:
    return record.read_text().split() if record.exists() else []


@pytest.mark.parametrize("line, change, message", [
    ("os._exit(3)", None, r"^shape check failed: the task's code exited with status 3 while its shapes were checked$"),
    ("import ctypes; ctypes.string_at(0)", None,
     r"^shape check failed: the task's code crashed \(SIGSEGV\) while its shapes were checked \(in <module>, line 2\)"),
    ("", ("return F.gelu(self.conv(x))", "return (F.gelu(self.conv(x)).shape[0], 'not a tensor')"),
     r"^forward does not return a tensor$"),
    ("", ("return F.gelu(self.conv(x))", "y = F.gelu(self.conv(x))\n        return ()"),
     r"^forward does not return a tensor$"),
], ids=["exits", "segfaults", "returns-a-tuple-of-non-tensors", "returns-an-empty-tuple"])
def test_a_candidate_that_exits_crashes_or_returns_no_tensor_is_dropped_and_synthesis_goes_on(
        catalog, tmp_path, line, change, message):
    record = tmp_path / "pids"
    reply = recording(GOOD if change is None else GOOD.replace(*change), record, line)
    with ScriptedChatServer([say(reply)]) as server, pytest.raises(ComposeError, match=message):
        composer(catalog, server).compose(2, random.Random(0))
    assert len(ran_in(record)) == 1 and str(os.getpid()) not in ran_in(record)


def test_a_good_candidate_is_checked_in_one_child_per_distinct_code(catalog, tmp_path):
    record = tmp_path / "pids"
    reply = recording(GOOD, record)
    with ScriptedChatServer([say(reply), say(reply)]) as server:
        c = composer(catalog, server)
        first, _ = c.compose(2, random.Random(0))
        second, _ = c.compose(2, random.Random(0))
    assert first == second and "class Model" in first
    assert len(ran_in(record)) == 1 and str(os.getpid()) not in ran_in(record)   # checked once, elsewhere


def test_a_candidate_that_never_finishes_is_dropped_after_the_shape_checks_limit(catalog, tmp_path, monkeypatch):
    from cuda_agent.env.infra import task_child

    monkeypatch.setitem(task_child.KIND_TIMEOUT_S, "shape", 0.5)
    reply = GOOD.replace("return F.gelu(self.conv(x))", "while True: pass\n        return F.gelu(self.conv(x))")
    with ScriptedChatServer([say(reply)]) as server, pytest.raises(
            ComposeError, match=r"^shape check failed: the task's code did not finish within 0.5 s while its shapes"):
        composer(catalog, server).compose(2, random.Random(0))
