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

from cuda_agent.agent.context import ContextBudget
from cuda_agent.agent.loop import AgentConfig, EpisodeResult, run_episode
from cuda_agent.agent.session import KernelSession, Opening, Outcome, SessionError, SessionLimits, Step, StepInfo
from cuda_agent.agent.sft import SFTFilter, export_sft
from cuda_agent.agent.tools import AGENT_TOOLS, MCP_TOOLS, Tool, ToolLimits, call_tool
from cuda_agent.agent.trajectory import Trajectory, append_jsonl, read_jsonl
from cuda_agent.agent.workspace import Workspace, WorkspaceError
from cuda_agent.llm import ChatClient, ClientError, Completion, OpenAIClient, TransformersClient

__all__ = [
    "ChatClient", "ClientError", "Completion", "OpenAIClient", "TransformersClient",
    "ContextBudget", "AgentConfig", "EpisodeResult", "run_episode",
    "KernelSession", "Opening", "Outcome", "SessionError", "SessionLimits", "Step", "StepInfo",
    "SFTFilter", "export_sft", "AGENT_TOOLS", "MCP_TOOLS", "Tool", "ToolLimits", "call_tool",
    "Trajectory", "append_jsonl", "read_jsonl", "Workspace", "WorkspaceError",
]
