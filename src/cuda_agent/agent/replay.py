"""Replay: re-run a recorded trajectory's tool calls in a fresh workspace and score it again.

    outcome = replay(trajectory, "ws/")           # evaluator: the local evaluate unless given
    outcome.reward, outcome.trajectory            # compare with the recording

The model is not called: each recorded assistant message is one `KernelSession` step, so the
transcript is what the current environment says to the same moves (does an RFT reward stand?). The
recording's task, eval configs, tool set, tool and idle limits are used, not its turn or time limits.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from cuda_agent.agent.session import EventHandler, KernelSession, Outcome, SessionLimits
from cuda_agent.agent.tools import ToolLimits
from cuda_agent.agent.trajectory import Trajectory
from cuda_agent.env.config import EvalConfig
from cuda_agent.tasks import Task


def replay(trajectory: Trajectory, workspace_dir: str | Path, *, evaluator: Any = None,
           eval_config: EvalConfig | None = None, final_eval_config: EvalConfig | None = None,
           on_event: EventHandler | None = None) -> Outcome:
    """Re-run `trajectory` in `workspace_dir` (made afresh). The evaluation configs default to the
    recorded ones."""
    recorded = trajectory.config
    info = trajectory.task
    task = Task(name=info["name"], code=info["code"], origin=info.get("origin", ""))
    eval_config = eval_config or EvalConfig.from_dict(recorded["eval"])
    final_eval_config = final_eval_config or EvalConfig.from_dict(recorded.get("final_eval") or recorded["eval"])
    session = KernelSession(task, workspace_dir, eval_config=eval_config, evaluator=evaluator,
                            tools=[t["function"]["name"] for t in trajectory.tools],
                            limits=recorded_limits(recorded), final_eval_config=final_eval_config,
                            model=trajectory.model, driver_config={"replay_of": trajectory.id},
                            on_event=on_event)
    session.reset()
    assistants = [m for m in trajectory.messages[2:] if m.get("role") == "assistant"]
    turns = trajectory.turns
    with_usage = trajectory.usage.get("calls", 0) > 0   # an MCP session has no model calls to note
    for i, message in enumerate(assistants):
        if session.done:
            break
        if with_usage and i < len(turns):
            t = turns[i]
            session.note_model_turn(seconds=t.seconds, prompt_tokens=t.prompt_tokens,
                                    completion_tokens=t.completion_tokens, finish_reason=t.finish_reason,
                                    compacted=t.compacted)
        session.step(message.get("tool_calls") or [], assistant=message)
    if session.done:
        return session.finish()
    for t in turns[len(assistants):]:   # model calls that failed (the episode's last)
        session.note_model_turn(compacted=t.compacted, failed=True)
    return session.finish(trajectory.stop_reason or None, trajectory.error)


def recorded_limits(config: dict) -> SessionLimits:
    """The tool and idle limits a trajectory was made with (by our loop, or by any session)."""
    agent = config.get("agent") or {}
    limits = config.get("limits") or {}
    tools = limits.get("tools") or agent.get("limits") or {}
    idle = limits.get("max_idle_turns") or agent.get("max_idle_turns") or SessionLimits.max_idle_turns
    return SessionLimits(max_turns=None, max_seconds=None, max_idle_turns=idle, tools=ToolLimits(**tools))


_DURATION = re.compile(r"; [0-9.]+ s\]")


def differing_outputs(recorded: Trajectory, replayed: Trajectory) -> list[int]:
    """Indices of the messages whose text differs between a recording and its replay (the
    durations bash reports aside)."""
    def text(m: dict) -> str:
        return _DURATION.sub("", m.get("content") or "")
    pairs = zip(recorded.messages, replayed.messages)
    diff = [i for i, (a, b) in enumerate(pairs) if a.get("role") != b.get("role") or text(a) != text(b)]
    shorter = min(len(recorded.messages), len(replayed.messages))
    return diff + list(range(shorter, max(len(recorded.messages), len(replayed.messages))))
