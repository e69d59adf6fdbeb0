"""A tool is declared once: its arguments as a pydantic model, its description, its function.

From that come `Tool.schema()` (the OpenAI function schema: our loop, verl's tool config, the MCP
listing), `Tool.check(raw)` (what the model sent, validated: unknown and missing parameters, wrong
top-level types, obvious slips forgiven) and `Tool.method()` (a typed method with a Google-style
docstring, which is how TRL's `environment_factory` and transformers' `get_json_schema` read tools).
Only top-level arguments are checked here; a list's items (`multi_edit`'s edits, `todo`'s todos) are
checked by the tool itself, so its message can name the item.
"""

from __future__ import annotations

import inspect
import json
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable, Literal

from pydantic import BaseModel, ConfigDict

from cuda_agent.agent.tools.core import ToolContext, ToolError, ToolOutput

_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", list: "array", dict: "object"}
_PYTHON_TYPES = {"string": str, "integer": int, "number": (int, float), "boolean": bool, "array": list,
                 "object": dict}


class Arguments(BaseModel):
    """Base of a tool's arguments: one field per parameter, `Field(description=...)` for the model."""

    model_config = ConfigDict(extra="forbid")


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    arguments: type[Arguments]
    run: Callable[[ToolContext, Any], str | ToolOutput]   # (context, checked arguments) -> output

    @property
    def parameters(self) -> dict:
        return object_schema(self.arguments)

    def schema(self) -> dict:
        return {"type": "function",
                "function": {"name": self.name, "description": self.description, "parameters": self.parameters}}

    def check(self, args: Any) -> Arguments:
        """The model's arguments as an instance of `self.arguments`; raises ToolError saying what is wrong."""
        if not isinstance(args, dict):
            raise ToolError(f"arguments for `{self.name}` must be a JSON object, got {type(args).__name__}")
        fields = self.arguments.model_fields
        unknown = sorted(set(args) - set(fields))
        if unknown:
            raise ToolError(f"`{self.name}` has no parameter {', '.join(unknown)}; "
                            f"its parameters are: {', '.join(fields) or 'none'}")
        missing = [name for name, f in fields.items() if f.is_required() and name not in args]
        if missing:
            raise ToolError(f"`{self.name}` needs {', '.join(missing)}")
        values = {}
        for key, value in args.items():
            kind = _json_type(fields[key].annotation)
            value = _forgive(kind, value)
            if value is None and not fields[key].is_required():
                continue
            expected = _PYTHON_TYPES[kind]
            if not isinstance(value, expected) or (kind in ("integer", "number") and isinstance(value, bool)):
                raise ToolError(f"`{self.name}`: {key} must be a {kind}, got {type(value).__name__}")
            values[key] = value
        return self.arguments.model_construct(**values)   # checked above; list items are the tool's to check

    def method(self) -> Callable[..., str]:
        """This tool as a method for an environment class (TRL's `environment_factory`): typed keyword
        parameters and a docstring describe it; calling it hands the arguments, unchecked, to
        `self._call_tool(name, arguments)`, so checking and messages stay those of `call_tool`."""
        name = self.name

        def method(self, **arguments) -> str:
            return self._call_tool(name, arguments)

        params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
        lines = []
        for key, f in self.arguments.model_fields.items():
            hint = _python_hint(f.annotation)
            default = inspect.Parameter.empty if f.is_required() else None
            params.append(inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
            lines.append(f"    {key}: {f.description or key.replace('_', ' ')}")
        method.__name__ = method.__qualname__ = name
        method.__signature__ = inspect.Signature(params, return_annotation=str)
        method.__annotations__ = {p.name: p.annotation for p in params[1:]} | {"return": str}
        method.__doc__ = self.description + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
        return method


# -- the JSON schema of a declaration -------------------------------------------------------------

@lru_cache(maxsize=None)
def object_schema(model: type[Arguments]) -> dict:
    properties = {key: _property_schema(f.annotation, f.description) for key, f in model.model_fields.items()}
    required = [key for key, f in model.model_fields.items() if f.is_required()]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _property_schema(annotation, description: str | None) -> dict:
    annotation = _without_none(annotation)
    schema: dict = {"type": _json_type(annotation)}
    if description:
        schema["description"] = description
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        schema["items"] = object_schema(item) if _is_model(item) else _property_schema(item, None)
    elif typing.get_origin(annotation) is Literal:
        schema["enum"] = list(typing.get_args(annotation))
    return schema


def _json_type(annotation) -> str:
    annotation = _without_none(annotation)
    if typing.get_origin(annotation) is Literal:
        return "string"
    if _is_model(annotation):
        return "object"
    return _JSON_TYPES[typing.get_origin(annotation) or annotation]


def _python_hint(annotation):
    """The annotation as transformers' `get_json_schema` understands it (nested models become dicts)."""
    inner = _without_none(annotation)
    if typing.get_origin(inner) is list and _is_model(typing.get_args(inner)[0]):
        inner = list[dict]
    return inner if inner is annotation else inner | None


def _without_none(annotation):
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(rest) == 1:
            return rest[0]
    return annotation


def _is_model(annotation) -> bool:
    return isinstance(annotation, type) and issubclass(annotation, BaseModel)


def _forgive(kind: str, value):
    """Obvious slips: numbers and booleans sent as strings, nested arguments sent as a JSON string
    (some models double-encode them)."""
    if kind == "integer" and isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    if kind == "boolean" and isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    if kind in ("array", "object") and isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value
