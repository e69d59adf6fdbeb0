"""A run's progress on the terminal (rich, to stderr): a bar of tasks and one line per finished one."""

from __future__ import annotations

import sys


class RunProgress:
    def __init__(self, title: str, total: int, done: int = 0, quiet: bool = False):
        self.quiet = quiet
        self.counts: dict[str, int] = {}
        if quiet:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(file=sys.stderr, highlight=False)
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("{task.fields[counts]}"), console=self.console)
        self.task = self.bar.add_task(title, total=total, completed=done, counts="")

    def __enter__(self):
        if not self.quiet:
            self.bar.start()
        return self

    def __exit__(self, *exc):
        if not self.quiet:
            self.bar.stop()

    def note(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text)

    def already(self, count: int, text: str) -> None:
        """Work a resumed run finds recorded: counted as done, not redone."""
        self.note(text)
        if not self.quiet and count:
            self.bar.advance(self.task, count)

    def finished(self, key: str, outcome: str, detail: str = "") -> None:
        """One task (or attempt) done: `outcome` is counted in the bar, `detail` printed beside it."""
        self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self.quiet:
            return
        self.bar.advance(self.task)
        self.bar.update(self.task, counts=" ".join(f"{k} {v}" for k, v in sorted(self.counts.items())))
        self.console.print(f"{key}: {outcome}" + (f"  [dim]{detail}[/dim]" if detail else ""))
