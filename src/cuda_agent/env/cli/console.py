"""What every command prints the same way: errors with their fix, the machine's readiness, and
live progress on a terminal (never on a pipe or with --json, so scripted output stays clean)."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import NoReturn

import typer

USAGE_ERROR = 2        # bad arguments, paths, tasks or solutions
MACHINE_ERROR = 3      # this machine or a service the command needs is not ready


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def on_terminal() -> bool:
    return sys.stderr.isatty()


def require_machine(backend: str, sandbox: str, cache_dir: Path | None) -> None:
    """Fail fast, one line per missing piece with the command that fixes it, before any work starts
    (`doctor.preflight` says which checks a command gets)."""
    from cuda_agent.env.infra.doctor import DOCTOR_HINT, preflight

    problems = preflight(backend, sandbox, cache_dir)
    if problems:
        for finding in problems:
            typer.echo(f"error: {finding.line()}", err=True)
        typer.echo(f"({DOCTOR_HINT})", err=True)
        raise typer.Exit(MACHINE_ERROR)


class StepProgress:
    """A spinner naming the step under way, with its elapsed time, and a line with the duration
    of each step as it ends. Pass as `evaluate(progress=...)`; use as a context manager."""

    def __init__(self, console=None, first: str = "starting"):
        from rich.console import Console

        self.console = console or Console(stderr=True, highlight=False)
        self.first = first
        self.current: str | None = None
        self.started = 0.0

    def __enter__(self) -> "StepProgress":
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self.progress.start()
        self.task = self.progress.add_task(self.first, total=None)
        self.current, self.started = self.first, time.monotonic()
        return self

    def __call__(self, text: str) -> None:
        self._finish_step()
        self.current, self.started = text, time.monotonic()
        self.progress.reset(self.task, description=text)

    def _finish_step(self) -> None:
        if self.current is not None:
            seconds = time.monotonic() - self.started
            from rich.markup import escape

            self.progress.console.print(f"[green]done[/green] {escape(self.current)} [dim]{seconds:.1f} s[/dim]",
                                        highlight=False, soft_wrap=True)
            self.current = None

    def __exit__(self, *exc) -> None:
        if exc[0] is None:
            self._finish_step()
        self.progress.stop()
