"""The agent's tools, each declared once (arguments as a pydantic model, description, function): that
gives the OpenAI schema, the MCP listing, TRL's typed methods and the argument checking. Nothing
raises at the model: bad arguments, unknown tools, missing files and timeouts come back as text it can
act on, and every output is capped so one call cannot flood the context.

    core.py      limits, context, output, capping
    schema.py    the declaration: Tool, Arguments; schema, checking and typed methods from it
    files.py     read, write, edit, multi_edit, glob, grep
    shell.py     bash
    todo.py      todo
    commands.py  compile, verify, profile; finish and submit
    registry.py  the tool sets; call_tool
"""

from cuda_agent.agent.tools.core import ToolContext, ToolError, ToolLimits, ToolOutput, cap
from cuda_agent.agent.tools.registry import AGENT_TOOLS, ALL_TOOLS, MCP_TOOLS, call_tool, registry
from cuda_agent.agent.tools.schema import Arguments, Tool

__all__ = ["ToolContext", "ToolError", "ToolLimits", "ToolOutput", "cap", "AGENT_TOOLS", "ALL_TOOLS", "MCP_TOOLS",
           "call_tool", "registry", "Arguments", "Tool"]
