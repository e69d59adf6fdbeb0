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

    def _call(self, name: str, arguments: dict) -> str:
        if self.done:
            return ENDED
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


_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool, "object": dict}


def _hint(prop: dict):
    if prop.get("type") == "array":   # a bare `list` reads as "object" in transformers' schema parser
        return list[_hint(prop.get("items") or {})]
    return _TYPES.get(prop.get("type"), str)


def typed_method(tool):
    """A tool's OpenAI schema (`cuda_agent.agent.tools`) as a typed, documented method, which is how
    TRL learns a tool's schema. Replace with the tool package's typed declarations once they exist."""
    props, required = tool.parameters.get("properties", {}), tool.parameters.get("required", [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations = {}
    for name in sorted(props, key=lambda n: n not in required):   # required ones first
        kind = _hint(props[name])
        optional = name not in required
        annotations[name] = (kind | None) if optional else kind
        params.append(inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if optional else inspect.Parameter.empty,
                                        annotation=annotations[name]))
    annotations["return"] = str

    def method(self, **arguments) -> str:
        return self._call(tool.name, {k: v for k, v in arguments.items() if v is not None})

    method.__name__ = method.__qualname__ = tool.name
    method.__signature__ = inspect.Signature(params, return_annotation=str)
    method.__annotations__ = annotations
    args = "".join(f"\n    {n}: {props[n].get('description') or n}" for n in props)
    method.__doc__ = tool.description + (f"\n\nArgs:{args}" if props else "")
    return method


def environment_class(settings: EpisodeSettings, base: type = KernelEnvironment) -> type:
    """An environment class whose tool methods are the settings' tools (default: those of `solve`)."""
    from cuda_agent.agent.tools import AGENT_TOOLS

    chosen = named_tools(settings.tools) or AGENT_TOOLS
    return type(base.__name__, (base,), {"settings": settings, **{t.name: typed_method(t) for t in chosen}})


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
