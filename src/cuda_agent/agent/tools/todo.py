"""The todo tool: the model's own plan, replaced on each call."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from cuda_agent.agent.tools.core import ToolContext, ToolError
from cuda_agent.agent.tools.schema import Arguments, Tool

_MARK = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


class TodoItem(Arguments):
    """One entry of the list (items are checked by the tool, which names the failing one)."""

    content: str = Field(description="the task")
    status: Literal["pending", "in_progress", "completed"] | None = None


class TodoArguments(Arguments):
    todos: list[TodoItem]


def run_todo(ctx: ToolContext, args: TodoArguments) -> str:
    todos = []
    for i, item in enumerate(args.todos, 1):
        if not isinstance(item, dict) or not isinstance(item.get("content"), str):
            raise ToolError(f"todo {i}: needs a string `content`")
        status = item.get("status", "pending")
        if status not in _MARK:
            raise ToolError(f"todo {i}: status must be one of {', '.join(_MARK)}")
        todos.append({"content": item["content"], "status": status})
    ctx.todos = todos
    if not todos:
        return "todo list cleared"
    return "todo list:\n" + "\n".join(f"{_MARK[t['status']]} {t['content']}" for t in todos)


TODO = Tool("todo", "Replace your todo list (to plan and track multi-step work); returns the list.",
            TodoArguments, run_todo)
