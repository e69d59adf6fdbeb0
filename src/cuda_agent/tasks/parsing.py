"""Parsing Python source from many threads at once.

CPython 3.11 (seen on 3.11.7) can fail a parse with "SystemError: AST constructor recursion depth
mismatch" when two threads build `ast` trees at the same time (gh-106905): the recursion depth it
checks is shared. Agent sessions reset in worker threads (64 at once in one test), and each parses the
task's code, so every `ast.parse` of ours goes through one lock. Parsing a task takes milliseconds.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time (raises SyntaxError as it does)."""
    with _LOCK:
        return ast.parse(source, filename=filename)
