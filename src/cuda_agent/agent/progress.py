"""Live progress of an episode on the terminal: one line per model call and per tool call."""

from __future__ import annotations

import json
import sys


def _short(text: str, n: int = 100) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[: n - 3] + "..."


def _args_preview(arguments) -> str:
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else (arguments or {})
    except json.JSONDecodeError:
        return _short(str(arguments), 60)
    if not isinstance(args, dict):
        return _short(str(args), 60)
    for key in ("command", "path", "pattern"):
        if key in args:
            return _short(str(args[key]), 70)
    return _short(", ".join(args), 60)


class ProgressPrinter:
    """An `on_event` handler for `run_episode` that prints with rich to stderr."""

    def __init__(self, file=None):
        from rich.console import Console

        self.console = Console(file=file or sys.stderr, highlight=False, soft_wrap=True)

    def __call__(self, kind: str, data: dict) -> None:
        c = self.console
        if kind == "start":
            c.print(f"[bold]{data['task']}[/bold] with {data['model']} in {data['workspace']}")
        elif kind == "model":
            tokens = f"{data.get('prompt_tokens') or '?'}+{data.get('completion_tokens') or '?'} tok"
            calls = ", ".join(data["tool_calls"]) or "no tool call"
            c.print(f"[cyan]turn {data['turn']:>3}[/cyan] {data['seconds']:.1f}s {tokens}: {calls}"
                    + (f"  [dim]{_short(data['content'], 80)}[/dim]" if data.get("content") else ""))
        elif kind == "tool":
            mark = "[green]ok[/green]" if data["ok"] else "[red]error[/red]"
            first = _short(data["text"].strip().splitlines()[0] if data["text"].strip() else "", 90)
            c.print(f"          {data['name']}({_args_preview(data['arguments'])}) {mark} {data['seconds']:.1f}s"
                    f"  [dim]{first}[/dim]")
        elif kind == "best":
            speed = data.get("speedup_vs_compile")
            c.print(f"          [bold green]new best[/bold green]: reward {data['reward']}"
                    + (f", {speed:.2f}x vs torch.compile" if speed else ""))
        elif kind == "stop":
            c.print(f"stopped: {data['reason']}" + (f" ({_short(data['error'], 200)})" if data.get("error") else ""))
        elif kind == "rescore":
            r = data["result"]
            c.print(f"re-evaluated {data['digest']}: " + ("correct" if r.correct else "rejected")
                    + f", reward {r.reward}")
        elif kind == "final":
            speed = data.get("speedup_vs_compile")
            c.print(f"[bold]final reward {data['reward']}[/bold]"
                    + (f", {speed:.2f}x vs torch.compile" if speed else ""))
