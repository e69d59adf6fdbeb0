"""The RFT data as verl's SFT trainer reads it: `RFTDataset`, verl's `MultiTurnSFTDataset` on the
exact records of `cuda_agent.agent.sft` (`messages_json`, `tools_json`), named in the SFT config by
`cuda-agent train rft` (`data.custom_cls`). Unlike the parquet's nested columns, and as the rollout saw:

- tool-call arguments are JSON objects and tool schemas carry no null keys;
- a run of tool messages (a turn with several calls) is one message when the chat template renders it
  as one block (Qwen's do): verl renders each message alone and checks the concatenation against the
  whole conversation, which fails on such runs; the joined message renders to exactly the block.
"""

from __future__ import annotations

import json

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

_A, _B = "\u2063a\u2063", "\u2063b\u2063"   # sentinels no tool output contains


def tool_joiner(tokenizer, **template_kwargs) -> str | None:
    """The text that joins two tool messages' contents into one message rendering exactly as the
    two do together; None when the template renders them apart (no joining needed) or joining
    cannot reproduce the block."""
    def render(messages):
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False,
                                             **template_kwargs)

    def tool(text):
        return {"role": "tool", "content": text, "tool_call_id": "c"}

    try:
        together = render([tool(_A), tool(_B)])
        a_alone, b_alone = render([tool(_A)]), render([tool(_B)])
    except Exception:   # a template that wants a user turn first: leave the messages as they are
        return None
    prefix = a_alone[: a_alone.index(_A)]
    if together.startswith(prefix) and together[len(prefix):] == a_alone[len(prefix):] + b_alone[len(prefix):]:
        return None   # rendered apart: the per-message rendering already matches
    joiner = together[together.index(_A) + len(_A): together.index(_B)]
    return joiner if render([tool(_A + joiner + _B)]) == together else None


def join_tool_runs(messages: list[dict], joiner: str | None) -> list[dict]:
    if joiner is None:
        return messages
    out: list[dict] = []
    for m in messages:
        if m.get("role") == "tool" and out and out[-1].get("role") == "tool":
            out[-1] = {**out[-1], "content": out[-1]["content"] + joiner + m["content"]}
        else:
            out.append(dict(m))
    return out


class RFTDataset(MultiTurnSFTDataset):
    """`MultiTurnSFTDataset` on `messages_json`/`tools_json` (exact records), tool runs joined where
    the template renders them as one block. Tokenisation, loss masks and verl's consistency check
    are the parent's."""

    def _read_files_and_process(self):
        super()._read_files_and_process()
        if "messages_json" not in self.dataframe.columns:
            return
        import pandas as pd

        frame = self.dataframe.reset_index(drop=True)
        joiner = tool_joiner(self.tokenizer, **dict(self.apply_chat_template_kwargs or {}))
        self.messages = [join_tool_runs(json.loads(x), joiner) for x in frame["messages_json"]]
        self.tools = [json.loads(x) for x in frame["tools_json"]]
        frame[self.messages_key] = pd.Series(self.messages, index=frame.index, dtype=object)
        frame[self.tools_key] = pd.Series(self.tools, index=frame.index, dtype=object)
        self.dataframe = frame
