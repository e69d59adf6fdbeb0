"""The optional LLM composer, against a scripted OpenAI-compatible server on 127.0.0.1 (real HTTP
through the same client as the agent's, no model)."""

from __future__ import annotations

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
