"""The optional LLM composer, driven by a fake OpenAI-compatible client (no network, no model)."""

from __future__ import annotations

import random
from types import SimpleNamespace

import pytest

from cuda_agent.synth.compose import ComposeError, render_candidate
from cuda_agent.synth.llm import LLMComposer, extract_code, uses

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


class FakeClient:
    def __init__(self, reply: str):
        self.reply, self.calls = reply, []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **kwargs):
        self.calls.append(kwargs)
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=self.reply))])


def composer(catalog, reply, ops=("nn.Conv2d", "F.gelu")):
    c = LLMComposer(FakeClient(reply), "fake-model", catalog)
    c.pick_ops = lambda k, rng: list(ops)
    return c


def test_accepts_a_valid_program_and_prompts_with_the_ops(catalog):
    c = composer(catalog, GOOD)
    code, ops = c.compose(2, random.Random(0))
    assert ops == ["nn.Conv2d", "F.gelu"] and "class Model" in code
    prompt = c.client.calls[0]["messages"][1]["content"]
    assert "nn.Conv2d(in_channels, out_channels, kernel_size" in prompt and "F.gelu" in prompt
    rescaled = render_candidate({"kind": "code", "code": code}, None, batch=64)
    assert "batch_size = 64" in rescaled


@pytest.mark.parametrize("reply, message", [
    (GOOD.replace("F.gelu(self.conv(x))", "torch.relu(self.conv(x))"), "does not use F.gelu"),
    (GOOD.replace("nn.Conv2d(3, 8, 3)", "nn.Conv2d(5, 8, 3)"), "shape check failed"),
    (GOOD.replace("batch_size = 4", "batch_size = int('4')"), "batch_size"),
    ("no code at all", "syntax error"),
])
def test_rejects_what_the_rules_would_not_build(catalog, reply, message):
    with pytest.raises(ComposeError, match=message):
        composer(catalog, reply).compose(2, random.Random(0))


def test_helpers():
    assert extract_code("```python\nx = 1\n```") == "x = 1\n"
    assert uses("import torch.nn.functional as F\nF.gelu(x)", "F.gelu")
    assert uses("torch.nn.functional.gelu(x)", "F.gelu")
    assert not uses("F.relu(x)", "F.gelu")
