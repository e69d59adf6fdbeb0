"""Fixtures for the RL adapters: a tiny local chat model, and the session class they drive."""

from __future__ import annotations

import json

import pytest

SESSION = "cuda_agent.agent:KernelSession"


def corpus() -> list[str]:
    from cuda_agent.agent.prompts import SYSTEM_PROMPT, TASK_PROMPT
    from cuda_agent.agent.tools import AGENT_TOOLS

    return [SYSTEM_PROMPT, TASK_PROMPT, json.dumps([t.schema() for t in AGENT_TOOLS])] * 2


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A folder with a random 2-layer Qwen2 model and a BPE tokenizer trained here (Qwen2.5 template)."""
    pytest.importorskip("trl")
    from cuda_agent.rl import tiny

    tokenizer = tiny.build_tokenizer(corpus(), vocab_size=512)
    return tiny.save(tmp_path_factory.mktemp("tiny"), tokenizer, tiny.build_model(tokenizer))
