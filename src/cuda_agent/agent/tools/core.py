"""What every tool shares: its limits, the context it acts on, what it returns, and output capping."""

from __future__ import annotations

from dataclasses import dataclass, field

from cuda_agent.agent.workspace import CommandResult, Workspace


@dataclass
class ToolLimits:
    bash_timeout_s: float = 600.0      # a CUDA build plus a profile run fits
    max_output_chars: int = 16_000     # head and tail of longer outputs are kept
    read_max_lines: int = 2000
    max_line_chars: int = 2000
    grep_max_results: int = 200
    isolate_network: bool = True       # bash runs without network where the OS allows it


@dataclass
class ToolContext:
    workspace: Workspace
    limits: ToolLimits = field(default_factory=ToolLimits)
    todos: list[dict] = field(default_factory=list)


@dataclass
class ToolOutput:
    text: str
    ok: bool = True
    error: str | None = None             # "unknown_tool" | "invalid_arguments" | "tool_error" | "internal"
    command: CommandResult | None = None  # set by compile/verify/profile
    finish: bool = False


class ToolError(Exception):
    """A failure the model caused and can fix; the message is shown to it."""


def cap(text: str, limit: int) -> str:
    """Keep the head and the tail (errors are usually at one end) and say what was dropped."""
    if len(text) <= limit:
        return text
    head = limit * 2 // 3
    tail = limit - head
    dropped = len(text) - head - tail
    return (f"{text[:head]}\n[... {dropped} characters omitted; narrow the command "
            f"(grep, head, tail) to see them ...]\n{text[-tail:]}")
