"""A workspace's tools over the Model Context Protocol, so existing coding agents can be the policy.

    cuda-agent mcp --workspace DIR            # stdio (what Claude Code, Codex, etc. launch)
    cuda-agent mcp --workspace DIR --http 8765  # streamable HTTP on 127.0.0.1:8765/mcp

Serves compile, verify, profile and the file tools (bash, read, write, edit, multi_edit, glob, grep),
the same implementations the built-in loop uses. Needs the `mcp` package, version 2 or later.
"""

from __future__ import annotations

import os

from cuda_agent.agent.tools import MCP_TOOLS, ToolContext, ToolLimits, call_tool, registry
from cuda_agent.agent.workspace import Workspace

INSTRUCTIONS = ("Tools of a cuda-agent workspace: write kernels in kernels/ and ModelNew in model_new.py, "
                "then compile, verify and profile. Read SKILL.md first for the rules and the playbook.")


def build_server(workspace: Workspace, limits: ToolLimits | None = None):
    """A low-level MCP `Server` whose tools act on `workspace`."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server

    tools = registry(MCP_TOOLS)
    ctx = ToolContext(workspace, limits or ToolLimits())
    listing = [types.Tool(name=t.name, description=t.description, inputSchema=t.parameters)
               for t in tools.values()]
    lock = anyio.Lock()   # one tool at a time: tools share the workspace and the build cache

    async def on_list_tools(_ctx, _params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def on_call_tool(_ctx, params) -> types.CallToolResult:
        async with lock:
            out = await anyio.to_thread.run_sync(call_tool, tools, ctx, params.name, params.arguments or {})
            restored = workspace.restore_protected()
        text = out.text
        if restored:
            text += f"\nnote: protected files were modified and have been restored: {', '.join(restored)}"
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], isError=not out.ok)

    from cuda_agent import __version__

    try:
        return Server("cuda-agent", version=__version__, instructions=INSTRUCTIONS,
                      on_list_tools=on_list_tools, on_call_tool=on_call_tool)
    except TypeError as exc:  # mcp 1.x registers handlers with decorators instead
        raise RuntimeError("`cuda-agent mcp` needs the mcp package version 2 or later "
                           "(pip install 'mcp>=2')") from exc


async def serve_stdio(workspace: Workspace) -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(workspace)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(workspace: Workspace, port: int, host: str = "127.0.0.1") -> None:
    import uvicorn

    app = build_server(workspace).streamable_http_app(host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(workspace_dir: str | os.PathLike, http_port: int | None = None) -> None:
    import anyio

    ws = Workspace.open(workspace_dir)
    if http_port:
        serve_http(ws, http_port)
    else:
        anyio.run(serve_stdio, ws)
