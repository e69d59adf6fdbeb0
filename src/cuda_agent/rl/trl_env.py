"""The kernel episode as a TRL environment: `GRPOTrainer(environment_factory=environment_class(...))`.

TRL (1.16) exposes an environment's public methods as tools (schema from type hints and docstring),
calls `reset(**row)` before each rollout (instances are pooled and reused, so reset clears
everything) and `get_reward()` once the model stops calling tools. Here each instance drives one
`KernelSession` at a time: the tool methods are the session's tools, `get_reward` finishes the
session (final clean evaluation) and returns its milestone reward, or None for an infrastructure
failure (TRL ignores it).
"""

from __future__ import annotations

import inspect
import uuid

from cuda_agent.rl.episode import (EpisodeSettings, open_session, record, remove_workspace, task_from_info,
                                   tools as named_tools, workspace_dir)

ENDED = "Error: the episode has ended (finish was called). Reply without a tool call."


class KernelEnvironment:
    settings: EpisodeSettings = EpisodeSettings()

    def __init__(self):
        self.session = self.workspace = self.outcome = None
        self.done = False
        self.calls: list[tuple[str, dict]] = []

    def reset(self, **row) -> None:
        self._close()
        self.workspace = workspace_dir(self.settings, uuid.uuid4().hex)
        self.session = open_session(task_from_info(row["extra_info"]), self.workspace, self.settings)
        self.session.reset()
        self.done, self.outcome, self.calls = False, None, []
        self._prepare(self.workspace)
        return None   # the prompt is already the session's opening (see `prompt_row`)

    def _prepare(self, workspace) -> None:
        """Hook for subclasses: put extra files into a fresh workspace."""

    def _call_tool(self, name: str, arguments: dict) -> str:
        """What every tool method calls (`Tool.method()`): one step of the session."""
        if self.done:
            return ENDED
        arguments = {k: v for k, v in arguments.items() if v is not None}   # TRL passes unset optionals
        self.calls.append((name, arguments))
        step = self.session.step([{"name": name, "arguments": arguments}])
        self.done = step.done
        return "\n".join(m.get("content") or "" for m in step.messages)

    def get_reward(self) -> float | None:
        self.outcome = self.session.finish(stop_reason="finish" if self.done else "no_tool_calls")
        record(self.outcome, self.settings)
        self._close()
        return None if self.outcome.reward is None else float(self.outcome.reward)

    def _close(self) -> None:
        if self.workspace is not None:
            remove_workspace(self.workspace, self.settings)
        self.session = self.workspace = None


def environment_class(settings: EpisodeSettings, base: type = KernelEnvironment) -> type:
    """An environment class whose tool methods are the settings' tools (default: those of `solve`)."""
    from cuda_agent.agent.tools import AGENT_TOOLS

    chosen = named_tools(settings.tools) or AGENT_TOOLS
    return type(base.__name__, (base,), {"settings": settings, **{t.name: t.method() for t in chosen}})


def tool_schemas(env_cls: type) -> list[dict]:
    """The schemas TRL renders into the prompt for this class, in TRL's order (method names sorted)."""
    from transformers.utils import get_json_schema

    env = env_cls()
    names = sorted(n for n, _ in inspect.getmembers(env_cls, predicate=inspect.isfunction)
                   if not n.startswith("_") and n not in ("reset", "get_reward"))
    return [get_json_schema(getattr(env, n)) for n in names]


def prompt_row(task, settings: EpisodeSettings) -> dict:
    """A dataset row for TRL: the session's own opening as the prompt, the task in `extra_info`."""
    root = workspace_dir(settings, "opening-" + uuid.uuid4().hex)
    try:
        opening = open_session(task, root, settings).reset()
    finally:
        remove_workspace(root, EpisodeSettings())
    return {"prompt": [dict(m) for m in opening.messages],
            "extra_info": {"task_name": task.name, "task_code": task.code, "task_origin": task.origin or task.name}}
