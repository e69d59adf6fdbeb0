"""LLM clients: one call = conversation + tool schemas in, one assistant message out.

- `OpenAIClient`: any OpenAI-compatible chat-completions endpoint with tool calls (vLLM, SGLang,
  hosted APIs), through the `openai` package, with its retries and timeouts.
- `TransformersClient`: a local Hugging Face model, for small experiments without a server.

Messages are plain OpenAI-format dicts throughout, so trajectories need no conversion.
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Protocol


class ClientError(RuntimeError):
    """The endpoint could not produce a response (after retries)."""


class ContextLengthError(ClientError):
    """The request was longer than the model's context window."""


@dataclass
class Completion:
    message: dict                       # {"role": "assistant", "content": ..., "tool_calls": [...]}
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    seconds: float = 0.0


class ChatClient(Protocol):
    model: str

    def complete(self, messages: list[dict], tools: list[dict], *, seed: int | None = None) -> Completion:
        """`seed`: the sampling seed of this call (None: the server's or the model's own)."""


_CONTEXT_ERROR = re.compile(r"context length|context window|maximum context|too long|too many tokens|"
                            r"prompt is too long|max_tokens.*exceed", re.I)


@dataclass
class OpenAIClient:
    model: str
    base_url: str | None = None
    api_key: str | None = None          # default: $OPENAI_API_KEY, or a placeholder for local servers
    timeout: float = 600.0              # per request, seconds
    max_retries: int = 4                # connection errors, 408/409/429/5xx, with backoff
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    extra_body: dict = field(default_factory=dict)   # e.g. {"top_k": 20} or chat_template_kwargs

    def __post_init__(self):
        import openai

        self._openai = openai
        key = self.api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY"
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout,
                                     max_retries=self.max_retries)

    def complete(self, messages: list[dict], tools: list[dict], *, seed: int | None = None) -> Completion:
        openai = self._openai
        kwargs: dict[str, Any] = {"model": self.model, "messages": messages}
        if tools:
            kwargs["tools"] = tools
        if seed is not None:
            kwargs["seed"] = seed
        for name in ("temperature", "top_p", "max_tokens"):
            if getattr(self, name) is not None:
                kwargs[name] = getattr(self, name)
        if self.extra_body:
            kwargs["extra_body"] = self.extra_body
        start = time.perf_counter()
        try:
            response = self._client.chat.completions.create(**kwargs)
        except openai.APIStatusError as exc:
            text = f"{exc.status_code}: {_error_text(exc)}"
            if exc.status_code in (400, 413) and _CONTEXT_ERROR.search(text):
                raise ContextLengthError(text) from exc
            raise ClientError(f"endpoint returned {text}") from exc
        except openai.APIError as exc:  # connection errors and timeouts, after retries
            raise ClientError(f"{type(exc).__name__}: {exc}") from exc
        seconds = time.perf_counter() - start
        if not getattr(response, "choices", None):
            raise ClientError("endpoint returned no choices")
        choice = response.choices[0]
        usage = getattr(response, "usage", None)
        return Completion(
            message=message_to_dict(choice.message),
            finish_reason=choice.finish_reason,
            prompt_tokens=getattr(usage, "prompt_tokens", None),
            completion_tokens=getattr(usage, "completion_tokens", None),
            seconds=seconds,
        )


def _error_text(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        return str(err.get("message", err) if isinstance(err, dict) else err)
    return str(getattr(exc, "message", exc))


def message_to_dict(message: Any) -> dict:
    """An SDK message object as a plain dict; tool-call arguments stay raw strings."""
    data = message.model_dump() if hasattr(message, "model_dump") else dict(message)
    out: dict[str, Any] = {"role": "assistant", "content": data.get("content") or ""}
    # Reasoning models served by vLLM/SGLang return their thinking separately.
    for key in ("reasoning_content", "reasoning"):
        if data.get(key):
            out["reasoning_content"] = data[key]
            break
    calls = []
    for call in data.get("tool_calls") or []:
        fn = call.get("function") or {}
        arguments = fn.get("arguments")
        if not isinstance(arguments, str):
            arguments = json.dumps(arguments if arguments is not None else {})
        calls.append({"id": call.get("id") or _call_id(), "type": "function",
                      "function": {"name": fn.get("name") or "", "arguments": arguments}})
    if not calls and out["content"]:
        out["content"], calls = parse_text_tool_calls(out["content"])
    if calls:
        out["tool_calls"] = calls
    return out


def _call_id() -> str:
    return "call_" + uuid.uuid4().hex[:16]


_TOOL_CALL_BLOCK = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.S)


def parse_text_tool_calls(text: str) -> tuple[str, list[dict]]:
    """Tool calls a model wrote as text (`<tool_call>{"name":..., "arguments":...}</tool_call>`,
    the Hermes/Qwen format) when the server did not parse them; returns (rest of text, calls).
    A block that is not valid JSON is kept as a call with its raw text as arguments, so the loop
    can tell the model what was wrong."""
    if "<tool_call>" not in text:
        return text, []
    calls = []
    for block in _TOOL_CALL_BLOCK.findall(text):
        try:
            obj = json.loads(block)
            name, arguments = obj.get("name", ""), obj.get("arguments", obj.get("parameters", {}))
            arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
        except (json.JSONDecodeError, AttributeError):
            match = re.search(r'"name"\s*:\s*"([^"]+)"', block)
            name, arguments = (match.group(1) if match else ""), block
        calls.append({"id": _call_id(), "type": "function", "function": {"name": name, "arguments": arguments}})
    rest = _TOOL_CALL_BLOCK.sub("", text).strip()
    return rest, calls


class TransformersClient:
    """A local model through `transformers` (optional dependency), using its chat template's
    tool support and parsing Hermes-style `<tool_call>` blocks from the output."""

    def __init__(self, model: str, *, max_new_tokens: int = 4096, temperature: float = 0.0,
                 device_map: str = "auto", torch_dtype: str = "auto"):
        try:
            from transformers import AutoModelForCausalLM, AutoTokenizer
        except ImportError as exc:
            raise ClientError("TransformersClient needs `pip install transformers accelerate`") from exc
        self.model = model
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        import importlib.util

        import torch

        if device_map == "auto" and importlib.util.find_spec("accelerate") is None:
            device_map = None  # "auto" needs accelerate; without it, one device: ours to choose
        self._tokenizer = AutoTokenizer.from_pretrained(model)
        self._model = AutoModelForCausalLM.from_pretrained(model, device_map=device_map, dtype=torch_dtype)
        if device_map is None and torch.cuda.is_available():
            self._model.to("cuda")

    def complete(self, messages: list[dict], tools: list[dict], *, seed: int | None = None) -> Completion:
        import torch

        start = time.perf_counter()
        if seed is not None and self.temperature > 0:
            torch.manual_seed(seed)
        prompt = self._tokenizer.apply_chat_template(template_messages(messages), tools=tools or None,
                                                     add_generation_prompt=True, tokenize=False)
        inputs = self._tokenizer(prompt, return_tensors="pt").to(self._model.device)
        sampling = ({"do_sample": True, "temperature": self.temperature} if self.temperature > 0
                    else {"do_sample": False})
        with torch.no_grad():
            out = self._model.generate(**inputs, max_new_tokens=self.max_new_tokens, **sampling)
        new = out[0][inputs["input_ids"].shape[1]:]
        text = self._tokenizer.decode(new, skip_special_tokens=True)
        content, calls = parse_text_tool_calls(text)
        message = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        finish = "length" if len(new) >= self.max_new_tokens else ("tool_calls" if calls else "stop")
        return Completion(message, finish, int(inputs["input_ids"].shape[1]), int(len(new)),
                          time.perf_counter() - start)


def template_messages(messages: list[dict]) -> list[dict]:
    """Messages for a Hugging Face chat template: tool-call arguments as dicts, which most
    templates expect (the OpenAI wire format keeps them as JSON strings)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c["function"])
                try:
                    if isinstance(fn["arguments"], str):
                        fn["arguments"] = json.loads(fn["arguments"])
                except json.JSONDecodeError:
                    fn["arguments"] = {}
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out
