"""The tool sets, and calling a tool by name the way the model calls it."""

from __future__ import annotations

import json
from typing import Iterable

from cuda_agent.agent.tools.commands import COMPILE, FINISH, PROFILE, SUBMIT, VERIFY
from cuda_agent.agent.tools.core import ToolContext, ToolError, ToolOutput, cap
from cuda_agent.agent.tools.files import EDIT, GLOB, GREP, MULTI_EDIT, READ, WRITE
from cuda_agent.agent.tools.schema import Tool
from cuda_agent.agent.tools.shell import BASH
from cuda_agent.agent.tools.todo import TODO

AGENT_TOOLS = (BASH, READ, WRITE, EDIT, MULTI_EDIT, GLOB, GREP, TODO, COMPILE, VERIFY, PROFILE, FINISH)
MCP_TOOLS = (COMPILE, VERIFY, PROFILE, BASH, READ, WRITE, EDIT, MULTI_EDIT, GLOB, GREP)
ALL_TOOLS = {t.name: t for t in (*AGENT_TOOLS, SUBMIT)}


def registry(tools: Iterable[Tool | str] = AGENT_TOOLS) -> dict[str, Tool]:
    """Tools by name, in the given order; names are looked up among all tools."""
    out = {}
    for tool in tools:
        if isinstance(tool, str):
            if tool not in ALL_TOOLS:
                raise ValueError(f"unknown tool {tool!r}; the tools are: {', '.join(ALL_TOOLS)}")
            tool = ALL_TOOLS[tool]
        out[tool.name] = tool
    return out


def call_tool(tools: dict[str, Tool], ctx: ToolContext, name: str, arguments: str | dict | None) -> ToolOutput:
    """Run one tool call from the model; never raises for anything the model did."""
    tool = tools.get(name)
    if tool is None:
        return ToolOutput(f"Error: unknown tool `{name}`. Available tools: {', '.join(tools)}.",
                          ok=False, error="unknown_tool")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError as exc:
            snippet = arguments if len(arguments) < 300 else arguments[:300] + "..."
            return ToolOutput(f"Error: the arguments for `{name}` are not valid JSON ({exc.msg} at "
                              f"position {exc.pos}): {snippet}\nCall the tool again with a JSON object.",
                              ok=False, error="invalid_arguments")
    try:
        args = tool.check(arguments if arguments is not None else {})
    except ToolError as exc:
        return ToolOutput(f"Error: {exc}", ok=False, error="invalid_arguments")
    try:
        result = tool.run(ctx, args)
    except ToolError as exc:
        return ToolOutput(f"Error: {exc}", ok=False, error="tool_error")
    except (OSError, UnicodeError, ValueError) as exc:
        return ToolOutput(f"Error: {type(exc).__name__}: {exc}", ok=False, error="tool_error")
    except Exception as exc:  # a bug on our side: report it, keep the episode alive
        return ToolOutput(f"Error: internal error in `{name}`: {type(exc).__name__}: {exc}",
                          ok=False, error="internal")
    out = result if isinstance(result, ToolOutput) else ToolOutput(result)
    out.text = cap(out.text, ctx.limits.max_output_chars)
    return out
