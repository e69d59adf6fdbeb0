"""Keeping a long episode inside the model's context window.

When the conversation nears the budget, the oldest material goes first, in three passes:
1. older tool outputs are shortened to their head and tail;
2. older assistant text and large tool-call arguments (whole files passed to `write`) likewise;
3. if still too long, the oldest turns are dropped whole, leaving a note.
The system prompt, the task message and the most recent messages are never touched. Only the
context sent to the model is compacted; the trajectory keeps the full transcript.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

CHARS_PER_TOKEN = 3.5   # a fair guess for code and English; calibrated from server usage when known
NOTE = "[Older turns were removed to fit the context window"
MARK = "[... shortened to save context; re-run the tool or re-read the file if you need it ...]"


@dataclass
class ContextBudget:
    max_tokens: int = 120_000      # prompt budget: the model's window minus room for one reply
    trigger: float = 0.85          # compact when the prompt reaches this share of the budget
    target: float = 0.6            # ... down to this share
    keep_recent: int = 8           # most recent messages never shortened
    shorten_to: int = 800          # characters kept of a shortened message


def message_chars(message: dict) -> int:
    n = len(message.get("content") or "")
    for call in message.get("tool_calls") or []:
        n += len(call["function"].get("arguments") or "") + len(call["function"].get("name") or "")
    return n + 16   # role and framing


def estimate_tokens(messages: list[dict], chars_per_token: float = CHARS_PER_TOKEN) -> int:
    return int(sum(message_chars(m) for m in messages) / chars_per_token)


def _shorten(text: str, keep: int) -> str:
    if len(text) <= keep + len(MARK) + 2:
        return text
    head = keep * 2 // 3
    return f"{text[:head]}\n{MARK}\n{text[-(keep - head):]}"


def _shorten_arguments(arguments: str, keep: int) -> str:
    """Shorten long string values inside JSON arguments, keeping the JSON valid (servers parse it)."""
    try:
        obj = json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments
    if not isinstance(obj, dict):
        return arguments
    changed = {k: _shorten(v, keep) if isinstance(v, str) else v for k, v in obj.items()}
    return json.dumps(changed) if changed != obj else arguments


def compact(messages: list[dict], budget: ContextBudget, chars_per_token: float = CHARS_PER_TOKEN) -> int:
    """Compact `messages` in place if they are over the trigger; returns how many were changed."""
    limit = budget.max_tokens * budget.trigger
    if estimate_tokens(messages, chars_per_token) <= limit:
        return 0
    goal = budget.max_tokens * budget.target
    head = 2 if len(messages) > 1 and messages[1].get("role") == "user" else 1   # system + task
    tail = max(head, len(messages) - budget.keep_recent)
    changed = 0

    def over() -> bool:
        return estimate_tokens(messages, chars_per_token) > goal

    for role in ("tool", "assistant"):               # passes 1 and 2
        for i in range(head, tail):
            if not over():
                return changed
            m = messages[i]
            if m.get("role") != role:
                continue
            new = dict(m, content=_shorten(m.get("content") or "", budget.shorten_to))
            if m.get("tool_calls"):
                new["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _shorten_arguments(
                    c["function"].get("arguments") or "", budget.shorten_to)}} for c in m["tool_calls"]]
            if new != m:
                messages[i] = new
                changed += 1

    # Pass 3: drop whole turns (an assistant message with the tool results that answer it).
    had_note = len(messages) > head and (messages[head].get("content") or "").startswith(NOTE)
    start = head + 1 if had_note else head
    dropped = 0
    while over() and start < len(messages) - budget.keep_recent:
        end = start + 1
        while end < len(messages) and messages[end].get("role") == "tool":
            end += 1
        del messages[start:end]
        dropped += end - start
    if dropped:
        before = int(messages[head]["content"].split("(")[1].split()[0]) if had_note else 0
        note = {"role": "user", "content": f"{NOTE} ({before + dropped} messages); re-read files you need.]"}
        if had_note:
            messages[head] = note
        else:
            messages.insert(head, note)
    return changed + dropped
