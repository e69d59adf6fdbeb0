"""A tiny chat model built locally (no downloads): a byte-level BPE tokenizer trained on the texts it
will see, with Qwen2.5's chat template, and a randomly initialised Qwen2 model.

Qwen2.5's template is one TRL parses tool calls for (`<tool_call>{json}</tool_call>`), and
`model_type = "qwen2"` selects verl's Qwen continuous-token builder, so both trainers treat the
tiny model like the real family.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
ADDED = ["<tool_call>", "</tool_call>"]   # plain added tokens, as in Qwen2.5: decoding keeps them


def chat_template() -> str:
    from trl.chat_template_utils import qwen2_5_chat_template

    return qwen2_5_chat_template


def build_tokenizer(texts: Iterable[str], vocab_size: int = 1024, split_words: bool = True):
    """`split_words=False` lets merges cross word boundaries: a few repeated texts (one prompt) then
    shrink to a few hundred tokens, which keeps a CPU run short."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=split_words)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL + ADDED, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(list(texts), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.add_tokens(ADDED)
    fast.chat_template = chat_template()
    return fast


def build_model(tokenizer, hidden: int = 64, layers: int = 2, heads: int = 4, max_positions: int = 4096,
                seed: int = 0):
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads // 2,
                         max_position_embeddings=max_positions, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    model = Qwen2ForCausalLM(config)
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model


def save(folder: str | os.PathLike, tokenizer, model) -> Path:
    folder = Path(folder)
    tokenizer.save_pretrained(folder)
    model.save_pretrained(folder)
    return folder
