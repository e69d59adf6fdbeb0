"""The agent: workspace, tools, the episode as a session, ReAct loop, trajectories, SFT export, MCP
server, replay; the LLM clients of `cuda_agent.llm` re-exported.

    from cuda_agent.agent import OpenAIClient, run_episode
    episode = run_episode(task, OpenAIClient("Qwen/Qwen3-32B", base_url="http://localhost:8000/v1"))
    episode.solution, episode.reward, episode.trajectory

    from cuda_agent.agent import KernelSession      # the same episode, driven turn by turn from outside
    session = KernelSession(task, "ws/"); opening = session.reset()
    step = session.step(tool_calls); outcome = session.finish()

Split as in inspect_ai: the task (`cuda_agent.tasks`), the solver (this loop and its tools) and the
scorer (`cuda_agent.env.evaluate`, which alone decides the reward).
"""

# Names resolve on first use (PEP 562): a workspace's `./verify` imports only what it runs, not the
# loop, the tools and the clients.
_WHERE = {
    "cuda_agent.agent.context": ("ContextBudget",),
    "cuda_agent.agent.loop": ("AgentConfig", "EpisodeResult", "run_episode"),
    "cuda_agent.agent.session": ("KernelSession", "Opening", "Outcome", "SessionError", "SessionLimits", "Step",
                                 "StepInfo"),
    "cuda_agent.agent.sft": ("SFTFilter", "export_sft"),
    "cuda_agent.agent.tools": ("AGENT_TOOLS", "MCP_TOOLS", "Tool", "ToolLimits", "call_tool"),
    "cuda_agent.agent.trajectory": ("Trajectory", "append_jsonl", "read_jsonl"),
    "cuda_agent.agent.workspace": ("Workspace", "WorkspaceError"),
    "cuda_agent.llm": ("ChatClient", "ClientError", "Completion", "OpenAIClient", "TransformersClient"),
}
_MODULE_OF = {name: module for module, names in _WHERE.items() for name in names}
__all__ = list(_MODULE_OF)


def __getattr__(name: str):
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_MODULE_OF[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
