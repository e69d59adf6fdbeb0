"""The local transformers client with a real (tiny, randomly initialised) model and tokenizer built
here, offline: chat template with tools, generation, token accounting, Hermes-style tool calls."""

import json

import pytest

pytest.importorskip("transformers")

from cuda_agent.llm import make_client  # noqa: E402
from cuda_agent.llm.client import TransformersClient  # noqa: E402

WORDS = ["<unk>", "<eos>", "<tool_call>", "</tool_call>", "{", "}", ":", ",", '"name"', '"arguments"',
         '"bash"', '"command"', '"ls"', "user", "assistant", "tool", "hello", "ok"]
# renders every message and the tool names, so the prompt shows both reached the template
TEMPLATE = ("{% for m in messages %}{{ m['role'] }} {{ m['content'] or '' }} {% endfor %}"
            "{% for t in tools or [] %}tool {{ t['function']['name'] }} {% endfor %}"
            "{% if add_generation_prompt %}assistant {% endif %}")
TOOLS = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object", "properties": {}}}}]


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-model")
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece()  # joins words with spaces
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>", pad_token="<eos>",
                            chat_template=TEMPLATE).save_pretrained(folder)
    config = GPT2Config(vocab_size=len(WORDS), n_positions=128, n_embd=16, n_layer=1, n_head=2,
                        bos_token_id=1, eos_token_id=1)
    GPT2LMHeadModel(config).save_pretrained(folder)
    return folder


def test_generates_with_the_chat_template_and_counts_tokens(tiny_model):
    client = TransformersClient(str(tiny_model), max_new_tokens=4)  # device_map "auto" without accelerate
    prompt = client._tokenizer.apply_chat_template([{"role": "user", "content": "hello"}], tools=TOOLS,
                                                   add_generation_prompt=True, tokenize=False)
    assert prompt.split() == ["user", "hello", "tool", "bash", "assistant"]
    completion = client.complete([{"role": "user", "content": "hello"}], TOOLS)
    assert completion.message["role"] == "assistant" and isinstance(completion.message["content"], str)
    assert completion.prompt_tokens == 5 and 1 <= completion.completion_tokens <= 4
    assert completion.finish_reason in ("length", "stop", "tool_calls") and completion.seconds > 0


def test_make_client_local_samples_reproducibly_with_a_seed(tiny_model):
    """`--local` picks this client; a call's seed makes its sampling (temperature > 0) repeatable."""
    client = make_client(str(tiny_model), local=True, max_tokens=12, temperature=1.0)
    assert isinstance(client, TransformersClient) and client.max_new_tokens == 12
    hello = [{"role": "user", "content": "hello"}]
    first, again = (client.complete(hello, TOOLS, seed=3).message for _ in range(2))
    assert first == again
    # without the seed, twelve tokens drawn from 18 words at temperature 1 repeat by chance almost never
    assert len({json.dumps(client.complete(hello, TOOLS).message) for _ in range(3)}) > 1


def test_tool_calls_written_as_text_become_tool_calls(tiny_model, monkeypatch):
    import torch

    client = TransformersClient(str(tiny_model), max_new_tokens=64)
    reply = '<tool_call> { "name" : "bash" , "arguments" : { "command" : "ls" } } </tool_call>'
    reply_ids = client._tokenizer(reply, return_tensors="pt")["input_ids"]

    def scripted_generate(input_ids, **_):  # the model's weights are random: script what it says
        return torch.cat([input_ids, reply_ids, torch.tensor([[1]])], dim=1)

    monkeypatch.setattr(client._model, "generate", scripted_generate)
    history = [{"role": "user", "content": "hello"},
               {"role": "assistant", "content": "ok", "tool_calls": [
                   {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}]},
               {"role": "tool", "tool_call_id": "c1", "content": "ok"}]
    completion = client.complete(history, TOOLS)
    calls = completion.message["tool_calls"]
    assert completion.finish_reason == "tool_calls" and completion.message["content"] == ""
    assert calls[0]["function"]["name"] == "bash" and json.loads(calls[0]["function"]["arguments"]) == {"command": "ls"}
    assert completion.completion_tokens == reply_ids.shape[1] + 1
