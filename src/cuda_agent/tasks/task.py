"""A task is a KernelBench-style Python program: `Model`, `get_inputs()`, `get_init_inputs()`."""

from __future__ import annotations

import ast
import hashlib
import sys
import types
from dataclasses import dataclass

from cuda_agent.tasks.parsing import parse

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")


class TaskError(ValueError):
    """The task itself is malformed (not the candidate's fault)."""


@dataclass(frozen=True)
class Task:
    name: str
    code: str
    origin: str = ""  # where it was loaded from, for messages

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.code.encode()).hexdigest()[:16]

    def check_syntax(self) -> None:
        """Raise TaskError unless the source parses and defines the required names."""
        try:
            tree = parse(self.code, filename=self.name)
        except SyntaxError as exc:
            raise TaskError(f"task {self.name}: syntax error at line {exc.lineno}: {exc.msg}") from None
        defined = {node.name for node in tree.body if isinstance(node, (ast.ClassDef, ast.FunctionDef))}
        defined |= {t.id for node in tree.body if isinstance(node, ast.Assign)
                    for t in node.targets if isinstance(t, ast.Name)}
        missing = [n for n in REQUIRED_NAMES if n not in defined]
        if missing:
            raise TaskError(f"task {self.name}: missing {', '.join(missing)} (a task defines class Model, "
                            "get_inputs() and get_init_inputs(), as KernelBench's problems do)")


def load_task_module(code: str, module_name: str, filename: str = "<task>") -> types.ModuleType:
    """Execute source code as a fresh module registered under `module_name`."""
    module = types.ModuleType(module_name)
    module.__file__ = filename
    sys.modules[module_name] = module  # dataclasses/pickling look modules up by name
    exec(compile(code, filename, "exec"), module.__dict__)
    return module


def strip_reference_model(code: str) -> str:
    """The task source without its `Model` class.

    The candidate's process needs `get_inputs`/`get_init_inputs` to draw inputs, but must never
    be able to reach the reference implementation.
    """
    tree = parse(code)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.ClassDef) and n.name == "Model")]
    return ast.unparse(tree)
