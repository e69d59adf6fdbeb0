"""A workspace as an MCP server, so existing coding agents can be the policy (needs `mcp` 2 or later).

    cuda-agent mcp --workspace DIR              # stdio (what Claude Code, Codex, etc. launch)
    cuda-agent mcp --workspace DIR --http 8765  # streamable HTTP on 127.0.0.1:8765/mcp

One server is one episode: a `KernelSession` driven one call at a time, with our loop's tools, `submit`
(ends the episode, returns the clean score) and SKILL.md as a resource. On stop, its trajectory (only
calls through these tools) is appended to a JSONL file, SFT data like ours, unscored if `submit` never
came: stdio clients kill a server too soon for an evaluation (`cuda-agent agent replay` scores it).
"""

from __future__ import annotations

import os
from contextlib import asynccontextmanager
from pathlib import Path

from cuda_agent.agent.session import KernelSession, Outcome, SessionLimits
from cuda_agent.agent.tools import MCP_TOOLS, ToolLimits
from cuda_agent.agent.trajectory import append_jsonl
from cuda_agent.agent.workspace import META_DIR, Workspace, format_result, skill_text

INSTRUCTIONS = ("Tools of a cuda-agent workspace: write kernels in kernels/ and ModelNew in model_new.py, "
                "then compile, verify and profile. Read SKILL.md first for the rules and the playbook. "
                "Call submit when you are done: it re-evaluates your best verified solution and ends the session.")
TOOL_NAMES = [t.name for t in MCP_TOOLS] + ["submit"]
SKILL_URI = "cuda-agent://workspace/SKILL.md"
ENDED = "Error: this session has ended ({}); start a new server for a new episode."
UNSCORED = "the MCP server stopped before submit; `cuda-agent agent replay` scores the trajectory"


def default_trajectories(workspace: Workspace) -> Path:
    return workspace.root / META_DIR / "trajectories.jsonl"


def build_server(workspace: Workspace, limits: ToolLimits | None = None, *, trajectories: Path | None = None,
                 model: str = "mcp", evaluator=None):
    """A low-level MCP `Server` whose tools drive one session on `workspace`. When the server stops,
    the trajectory is appended to `trajectories` (default: in the workspace's metadata folder)."""
    import anyio
    import mcp.types as types
    from mcp.server.lowlevel import Server

    session = KernelSession.attach(workspace, evaluator=evaluator, tools=TOOL_NAMES, model=model,
                                   limits=SessionLimits(max_turns=None, tools=limits or ToolLimits()))
    trajectories = trajectories or default_trajectories(workspace)
    listing = [types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
               for t in session.tools.values()]
    lock = anyio.Lock()   # one call at a time: the session is one episode, tools share the build cache

    @asynccontextmanager
    async def lifespan(_server):
        await session.areset()
        try:
            yield {}
        finally:
            with anyio.CancelScope(shield=True):   # a stopping server still records the episode
                async with lock:
                    outcome = await session.afinish(unscored=None if session.done else UNSCORED)
                append_jsonl(trajectories, outcome.trajectory)

    async def on_list_tools(_ctx, _params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listing)

    async def on_call_tool(_ctx, params) -> types.CallToolResult:
        async with lock:
            if session.done:
                text, ok = ENDED.format(session.stop_reason), False
            else:
                step = await session.astep([{"name": params.name, "arguments": params.arguments or {}}])
                text, ok = step.messages[0]["content"], step.info.calls[0].ok
                if step.done:
                    text += "\n" + score_text(await session.afinish())
        return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=not ok)

    async def on_list_resources(_ctx, _params) -> types.ListResourcesResult:
        return types.ListResourcesResult(resources=[types.Resource(
            uri=SKILL_URI, name="SKILL.md", mime_type="text/markdown",
            description="Rules, workspace layout, workflow and optimisation playbook (also ./SKILL.md).")])

    async def on_read_resource(_ctx, params) -> types.ReadResourceResult:
        if str(params.uri) != SKILL_URI:
            raise ValueError(f"no resource {params.uri}; the resource is {SKILL_URI}")
        return types.ReadResourceResult(contents=[types.TextResourceContents(
            uri=SKILL_URI, mime_type="text/markdown",
            text=workspace.originals.get("SKILL.md") or skill_text(workspace.backend, workspace.eval_config))])

    from cuda_agent import __version__

    try:
        return Server("cuda-agent", version=__version__, instructions=INSTRUCTIONS, lifespan=lifespan,
                      on_list_tools=on_list_tools, on_call_tool=on_call_tool,
                      on_list_resources=on_list_resources, on_read_resource=on_read_resource)
    except TypeError as exc:  # mcp 1.x registers handlers with decorators instead
        raise RuntimeError("`cuda-agent mcp` needs the mcp package version 2 or later "
                           "(pip install 'mcp>=2')") from exc


def score_text(outcome: Outcome) -> str:
    """What `submit` tells the agent: the clean score of its best solution."""
    result = outcome.result
    if outcome.reward is None:
        return f"The session ended; the clean re-evaluation could not be completed ({outcome.infra_error})."
    if outcome.solution is None or result is None:
        reason = format_result("profile", result) if result is not None else "no solution to evaluate"
        return f"The session ended; no solution passed the clean re-evaluation (reward {outcome.reward:g}).\n{reason}"
    return (f"The session ended. Clean re-evaluation of your best solution: reward {outcome.reward:g}.\n"
            + format_result("profile", result))


async def serve_stdio(workspace: Workspace, trajectories: Path | None = None, model: str = "mcp") -> None:
    from mcp.server.stdio import stdio_server

    server = build_server(workspace, trajectories=trajectories, model=model)
    async with stdio_server() as (read, write):
        await server.run(read, write, server.create_initialization_options())


def serve_http(workspace: Workspace, port: int, host: str = "127.0.0.1", trajectories: Path | None = None,
               model: str = "mcp") -> None:
    import uvicorn

    app = build_server(workspace, trajectories=trajectories, model=model).streamable_http_app(host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main(workspace_dir: str | os.PathLike, http_port: int | None = None, trajectories: Path | None = None,
         model: str = "mcp") -> None:
    import anyio

    ws = Workspace.open(workspace_dir)
    if http_port:
        serve_http(ws, http_port, trajectories=trajectories, model=model)
    else:
        anyio.run(serve_stdio, ws, trajectories, model)
