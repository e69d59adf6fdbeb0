"""Which client a command talks to: `make_client` turns the options every model-calling command takes
(`solve`, `bench --model`, `synth --composer llm`) into a `ChatClient`."""

from __future__ import annotations

import os

from cuda_agent.llm.client import ChatClient, OpenAIClient, TransformersClient

API_KEY_ENV = "OPENAI_API_KEY"


def make_client(model: str, *, base_url: str | None = None, api_key_env: str = API_KEY_ENV, local: bool = False,
                timeout: float = 600.0, retries: int = 4, temperature: float | None = None,
                max_tokens: int | None = None) -> ChatClient:
    """`local`: the model (a path or hub name) runs here through transformers; else an OpenAI-compatible
    endpoint at `base_url` (None: the SDK's `$OPENAI_BASE_URL`, else OpenAI's), with the API key read from
    the environment variable `api_key_env` (a placeholder when unset: local servers want none).
    Raises `ClientError` when the client cannot be made (transformers missing for `local`)."""
    if local:
        return TransformersClient(model, max_new_tokens=max_tokens or 4096, temperature=temperature or 0.0)
    return OpenAIClient(model, base_url=base_url, api_key=os.environ.get(api_key_env), timeout=timeout,
                        max_retries=retries, temperature=temperature, max_tokens=max_tokens)
