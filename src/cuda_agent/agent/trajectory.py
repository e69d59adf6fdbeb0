"""Trajectories: one JSON record per episode, appended to a JSONL file.

A record holds everything needed to replay, score, filter and train on an episode: the full
conversation (OpenAI message format, never shortened), the tool schemas, per-turn model usage and
per-call tool results (with the environment's result for compile/verify/profile), the best
solution, its clean re-evaluation, token counts and timings.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator


@dataclass
class ToolCallRecord:
    id: str
    name: str
    arguments: str                      # raw, as the model sent them
    ok: bool
    error: str | None = None            # unknown_tool | invalid_arguments | tool_error | internal
    seconds: float = 0.0
    output_chars: int = 0
    env: list[dict] = field(default_factory=list)   # EvalResult dicts this call produced
    command: str | None = None          # compile | verify | profile, when it ran one
    # one per `env` entry: True where a command on unchanged files was answered from its record (a
    # replayed result, nothing evaluated), False where it was evaluated afresh
    answered_from_record: list[bool] = field(default_factory=list)


@dataclass
class TurnRecord:
    turn: int
    seconds: float = 0.0                # model latency
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    tool_calls: list[ToolCallRecord] = field(default_factory=list)
    compacted: int = 0                  # messages shortened in the context before this call


@dataclass
class Trajectory:
    task: dict                          # name, origin, digest, code
    model: str
    id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: float = field(default_factory=time.time)
    messages: list[dict] = field(default_factory=list)
    tools: list[dict] = field(default_factory=list)
    turns: list[TurnRecord] = field(default_factory=list)
    stop_reason: str = ""               # finish | max_turns | time_limit | no_tool_calls | client_error
                                        # | context_exceeded | interrupted | error | stopped
    error: str | None = None
    best: dict | None = None            # {"turn", "digest", "files", "result"} as tracked in the episode
    final: dict | None = None           # EvalResult dict of the clean re-evaluation
    reward: float | None = None         # final milestone reward (-1 when nothing verified; None: see infra_error)
    infra_error: str | None = None      # why the outcome says nothing about the policy (our failure, not its)
    speedup_vs_compile: float | None = None
    usage: dict = field(default_factory=lambda: {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0})
    timings: dict = field(default_factory=dict)     # model_s, tools_s, eval_s, final_eval_s, total_s
    config: dict = field(default_factory=dict)      # agent and eval settings

    # -- summaries used by filters -------------------------------------------------------------

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    def tool_errors(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for turn in self.turns:
            for call in turn.tool_calls:
                if call.error:
                    counts[call.error] = counts.get(call.error, 0) + 1
        return counts

    def answered_calls(self) -> list[str]:
        """The ids of tool calls whose results were (all or in part) answered from a record, not evaluated."""
        return [call.id for turn in self.turns for call in turn.tool_calls if any(call.answered_from_record)]

    def summary(self) -> dict:
        return {"id": self.id, "task": self.task.get("name"), "model": self.model, "turns": self.num_turns,
                "stop_reason": self.stop_reason, "reward": self.reward,
                "speedup_vs_compile": self.speedup_vs_compile, "best_turn": (self.best or {}).get("turn"),
                "usage": self.usage, "timings": self.timings, "tool_errors": self.tool_errors(),
                "error": self.error, "infra_error": self.infra_error}

    # -- (de)serialisation ----------------------------------------------------------------------

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Trajectory":
        d = dict(d)
        d["turns"] = [TurnRecord(**{**t, "tool_calls": [ToolCallRecord(**c) for c in t.get("tool_calls", [])]})
                      for t in d.get("turns", [])]
        return cls(**d)


def append_jsonl(path: str | os.PathLike, trajectory: Trajectory) -> None:
    """Append one record; a single write call, so concurrent writers do not interleave lines."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps(trajectory.to_dict(), ensure_ascii=False) + "\n"
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line)


def read_jsonl(path: str | os.PathLike) -> Iterator[Trajectory]:
    with open(path, encoding="utf-8") as fh:
        for lineno, line in enumerate(fh, 1):
            if line.strip():
                try:
                    yield Trajectory.from_dict(json.loads(line))
                except (json.JSONDecodeError, TypeError) as exc:
                    raise ValueError(f"{path}:{lineno}: not a trajectory record ({exc})") from None
