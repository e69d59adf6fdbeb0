"""Trajectories -> multi-turn SFT data (parquet with `messages` and `tools`), as verl's SFT trainer
reads it (`data.messages_key=messages data.tools_key=tools`).

The default filter is the published rejection fine-tuning one: reward > 0, no invalid tool calls, no
redundant loops (the same call turn after turn); episodes that failed on our side (`infra_error`) are
always dropped. A parquet column has one schema, so missing keys read back as nulls and tool-call
arguments are JSON strings there; `messages_json`/`tools_json` hold the exact records as chat templates
take them (no null keys, arguments as JSON objects), for `cuda_agent.rl.sft_data.RFTDataset`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from cuda_agent.agent.trajectory import Trajectory

INVALID_CALLS = ("unknown_tool", "invalid_arguments")


@dataclass
class SFTFilter:
    min_reward: float = 0.0          # keep reward > min_reward
    max_invalid_calls: int = 0       # unknown tools or malformed arguments allowed
    max_repeats: int = 3             # identical consecutive tool calls allowed
    require_finish: bool = False     # only episodes that ended with `finish`


def longest_repeat(traj: Trajectory) -> int:
    """Length of the longest run of identical consecutive tool calls (name and arguments)."""
    best, run, last = 0, 0, None
    for turn in traj.turns:
        for call in turn.tool_calls:
            key = (call.name, call.arguments)
            run = run + 1 if key == last else 1
            last = key
            best = max(best, run)
    return best


def rejection_reason(traj: Trajectory, flt: SFTFilter) -> str | None:
    if traj.infra_error:   # we failed, not the policy: the record says nothing about it
        return "infra_error"
    if traj.reward is None or traj.reward <= flt.min_reward:
        return "reward"
    errors = traj.tool_errors()
    if sum(errors.get(k, 0) for k in INVALID_CALLS) > flt.max_invalid_calls:
        return "invalid_tool_calls"
    if longest_repeat(traj) > flt.max_repeats:
        return "redundant_loop"
    if flt.require_finish and traj.stop_reason != "finish":
        return "not_finished"
    return None


def _message(m: dict) -> dict:
    out = {"role": m["role"], "content": m.get("content") or "",
           "reasoning_content": m.get("reasoning_content"), "tool_call_id": m.get("tool_call_id"),
           "tool_calls": None}
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": c.get("id") or "", "type": "function",
                              "function": {"name": c["function"].get("name") or "",
                                           "arguments": c["function"].get("arguments") or "{}"}}
                             for c in m["tool_calls"]]
    return out


def _arguments(value):
    """Tool-call arguments as chat templates render them: a JSON object where the text is one."""
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except ValueError:
            return value
        return parsed if isinstance(parsed, dict) else value
    return value if value is not None else {}


def _exact(m: dict) -> dict:
    out = {k: v for k, v in m.items() if v is not None}
    if m.get("tool_calls"):
        out["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _arguments(c["function"]["arguments"])}}
                             for c in m["tool_calls"]]
    return out


def to_sft_row(traj: Trajectory) -> dict:
    messages = [_message(m) for m in traj.messages]
    # A transcript that ends on the model's side is what we want to teach; drop a dangling user nudge.
    while messages and messages[-1]["role"] == "user" and len(messages) > 2:
        messages.pop()
    compact = [_exact(m) for m in messages]
    return {"messages": messages, "tools": traj.tools, "messages_json": json.dumps(compact),
            "tools_json": json.dumps(traj.tools), "id": traj.id, "task": traj.task.get("name", ""),
            "reward": float(traj.reward) if traj.reward is not None else None,
            "speedup_vs_compile": traj.speedup_vs_compile, "num_turns": traj.num_turns,
            # tool calls answered from a record (unchanged files): a replayed result, not a fresh evaluation
            "answered_from_record": traj.answered_calls()}


def _schema():
    import pyarrow as pa

    call = pa.struct([("id", pa.string()), ("type", pa.string()),
                      ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())]))])
    message = pa.struct([("role", pa.string()), ("content", pa.string()), ("reasoning_content", pa.string()),
                         ("tool_call_id", pa.string()), ("tool_calls", pa.list_(call))])
    return message


def export_sft(trajectories: Iterable[Trajectory], path: str | os.PathLike,
               flt: SFTFilter | None = None) -> dict:
    """Write the kept trajectories to `path` (parquet); returns counts of kept and rejected."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    flt = flt or SFTFilter()
    rows, stats = [], {"kept": 0, "rejected": {}}
    for traj in trajectories:
        reason = rejection_reason(traj, flt)
        if reason:
            stats["rejected"][reason] = stats["rejected"].get(reason, 0) + 1
            continue
        rows.append(to_sft_row(traj))
        stats["kept"] += 1
    columns = {k: [r[k] for r in rows] for k in ("id", "task", "reward", "speedup_vs_compile", "num_turns",
                                                  "messages_json", "tools_json")}
    columns["answered_from_record"] = pa.array([r["answered_from_record"] for r in rows], type=pa.list_(pa.string()))
    arrays = {"messages": pa.array([r["messages"] for r in rows], type=pa.list_(_schema()))}
    if rows:
        arrays["tools"] = pa.array([r["tools"] for r in rows])   # nested; schema inferred
    table = pa.table({**arrays, **{k: v if isinstance(v, pa.Array) else pa.array(v) for k, v in columns.items()}})
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return stats


def read_sft(path: str | os.PathLike) -> list[dict]:
    """Rows with `messages` and `tools` exactly as exported (from the JSON columns)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(path).to_pylist()
    for row in rows:
        row["messages"] = json.loads(row.pop("messages_json"))
        row["tools"] = json.loads(row.pop("tools_json"))
    return rows
