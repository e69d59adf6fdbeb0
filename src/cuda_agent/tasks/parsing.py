"""Parsing Python source from many threads at once.

CPython 3.11 can fail a parse with "SystemError: AST constructor recursion depth mismatch" when two
threads build `ast` trees at the same time (gh-106905): the recursion depth it checks is shared.
Agent sessions reset in worker threads, each parsing the task's code, so every `ast.parse` of ours
goes through one lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time (raises SyntaxError as it does)."""
    with _LOCK:
        return ast.parse(source, filename=filename)
