import json

import pytest

from cuda_agent.llm import make_client
from cuda_agent.llm.client import (ClientError, ContextLengthError, OpenAIClient, parse_text_tool_calls,
                                   template_messages)

from .chat_server import Fail, ScriptedChatServer, call, say

MESSAGES = [{"role": "system", "content": "s"}, {"role": "user", "content": "hello"}]
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "d",
                                           "parameters": {"type": "object", "properties": {}}}}]


def test_tool_calls_usage_and_request_shape():
    with ScriptedChatServer([say("thinking", call("bash", command="ls"))]) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=0, temperature=0.2, max_tokens=64)
        completion = client.complete(MESSAGES, TOOLS)
    msg = completion.message
    assert msg["role"] == "assistant" and msg["content"] == "thinking"
    assert msg["tool_calls"][0]["function"] == {"name": "bash", "arguments": json.dumps({"command": "ls"})}
    assert completion.finish_reason == "tool_calls"
    assert completion.prompt_tokens > 0 and completion.completion_tokens == 20 and completion.seconds > 0
    sent = server.requests[0]
    assert sent["model"] == "m" and sent["tools"] == TOOLS and sent["temperature"] == 0.2 and sent["max_tokens"] == 64


def test_make_client_picks_the_endpoint_key_and_sampling_from_the_options(monkeypatch):
    """The one picker of `solve`, `bench --model` and `synth --composer llm`: the key comes from the
    environment variable the options name, retries and sampling settings reach the endpoint."""
    monkeypatch.setenv("MY_ENDPOINT_KEY", "sk-from-my-variable")
    with ScriptedChatServer([Fail(503), say("ok")]) as server:
        client = make_client("m", base_url=server.base_url, api_key_env="MY_ENDPOINT_KEY", retries=1,
                             temperature=0.3, max_tokens=32)
        assert client.complete(MESSAGES, TOOLS, seed=7).message["content"] == "ok"
    assert len(server.requests) == 2   # one retry
    assert {h["authorization"] for h in server.headers} == {"Bearer sk-from-my-variable"}
    sent = server.requests[-1]
    assert (sent["model"], sent["temperature"], sent["max_tokens"], sent["seed"]) == ("m", 0.3, 32, 7)
    with ScriptedChatServer([Fail(503), say("ok")]) as server:
        monkeypatch.delenv("MY_ENDPOINT_KEY")
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)   # no --base-url: the SDK's variable
        with pytest.raises(ClientError, match="503"):
            make_client("m", api_key_env="MY_ENDPOINT_KEY", retries=0).complete(MESSAGES, [])
    assert server.headers[0]["authorization"] == "Bearer EMPTY" and "seed" not in server.requests[0]


def test_retries_transient_errors_then_succeeds():
    with ScriptedChatServer([Fail(503), Fail(500), say("ok")]) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=2)
        assert client.complete(MESSAGES, TOOLS).message["content"] == "ok"
        assert len(server.requests) == 3


def test_gives_up_with_client_error():
    with ScriptedChatServer([Fail(500)] * 3) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=1)
        with pytest.raises(ClientError, match="500"):
            client.complete(MESSAGES, TOOLS)
        assert len(server.requests) == 2
    with pytest.raises(ClientError, match="Connection"):   # server gone
        OpenAIClient("m", base_url=server.base_url, max_retries=0, timeout=5).complete(MESSAGES, TOOLS)


def test_bad_request_is_not_retried_and_context_overflow_is_recognised():
    script = [Fail(400, "This model's maximum context length is 32768 tokens"), Fail(400, "bad tool schema")]
    with ScriptedChatServer(script) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=3)
        with pytest.raises(ContextLengthError):
            client.complete(MESSAGES, TOOLS)
        with pytest.raises(ClientError, match="bad tool schema"):
            client.complete(MESSAGES, TOOLS)
        assert len(server.requests) == 2


def test_timeout():
    with ScriptedChatServer([say("late")], delay=3) as server:
        client = OpenAIClient("m", base_url=server.base_url, max_retries=0, timeout=0.5)
        with pytest.raises(ClientError, match="Timeout"):
            client.complete(MESSAGES, TOOLS)


def test_text_tool_calls_are_parsed_when_the_server_did_not():
    text = 'Let me look.\n<tool_call>\n{"name": "read", "arguments": {"path": "model.py"}}\n</tool_call>'
    with ScriptedChatServer([say(text)]) as server:
        msg = OpenAIClient("m", base_url=server.base_url, max_retries=0).complete(MESSAGES, TOOLS).message
    assert msg["content"] == "Let me look."
    assert msg["tool_calls"][0]["function"] == {"name": "read", "arguments": '{"path": "model.py"}'}
    rest, calls = parse_text_tool_calls('<tool_call>{"name": "bash", "arguments": {"command": "ls"</tool_call>')
    assert rest == "" and calls[0]["function"]["name"] == "bash"
    assert calls[0]["function"]["arguments"].startswith('{"name"')   # kept raw: the loop reports the error
    assert parse_text_tool_calls("no calls here") == ("no calls here", [])


def test_template_messages_parse_arguments():
    msgs = [{"role": "assistant", "content": "", "tool_calls": [call("read", path="a"), call("x", "{oops")]}]
    out = template_messages(msgs)
    assert out[0]["tool_calls"][0]["function"]["arguments"] == {"path": "a"}
    assert out[0]["tool_calls"][1]["function"]["arguments"] == {}
    assert isinstance(msgs[0]["tool_calls"][0]["function"]["arguments"], str)   # input untouched
