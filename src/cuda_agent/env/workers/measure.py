"""The child in which the harness has a task's code measured on the meta device (infra/task_child.py, the
harness's side): role `measure` of `python -m cuda_agent.env.workers`, usually forked from the judges'
fork server, which (the CPU backend's) runs `warm_up` once before it forks anything.

The request comes on stdin (the kind, the task's name, code and origin); the answer, `{"value": the
result's fields}` (None where meta cannot tell) or `{"raised": ...}` for what the measurement does not
catch, goes to the protocol descriptor. An exit the task's code asks for (`sys.exit`) is the child's.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys
from typing import NoReturn

from cuda_agent.env.workers.protocol import PROTOCOL_FD_ENV
from cuda_agent.tasks.task import Task

ROLE = "measure"
# each kind: the module, its function measuring a task in this process, and the class of its result
KINDS = {
    "footprint": ("cuda_agent.tasks.footprint", "measure_footprint", "Footprint"),
    "work": ("cuda_agent.env.measure.work", "measure_work", "Work"),
    "shape": ("cuda_agent.tasks.shapes", "check_shapes", "ShapeCheck"),   # a synthesised candidate's
}

_WARM_UP = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.linear(x)).sum(dim=1)

def get_inputs():
    return [torch.randn(4, 8)]

def get_init_inputs():
    return []
"""


def _measure(kind: str):
    module, function, _ = KINDS[kind]
    return getattr(importlib.import_module(module), function)


def warm_up() -> None:
    """In the fork server, once: a small task measured by every kind (each only runs it on meta and
    returns its result), so that what PyTorch loads at its first forward on meta (sympy, dynamo) is
    loaded once there, not again in every child."""
    for kind in KINDS:
        try:
            _measure(kind)(Task("warm-up", _WARM_UP))
        except Exception:   # only a later child's time depends on it
            pass


def child_main() -> NoReturn:
    """The request from stdin, the measurement, its answer on the protocol descriptor; never returns."""
    answer_fd = int(os.environ.pop(PROTOCOL_FD_ENV))
    request = json.loads(sys.stdin.read())
    measure = _measure(request["kind"])
    status, answer = 0, None
    try:
        value = measure(Task(request["name"], request["code"], request["origin"]))
        answer = {"value": None if value is None else dataclasses.asdict(value)}
    except SystemExit as exc:   # the exit it asked for, as the interpreter would make it
        code = exc.code
        if code is not None and not isinstance(code, int):
            print(code, file=sys.stderr)
        status = 0 if code is None else code if isinstance(code, int) else 1
    except BaseException as exc:   # what the measurement does not catch (KeyboardInterrupt raised by the task)
        answer = {"raised": f"{type(exc).__name__}: {exc}"[:500]}
    if answer is not None:
        with os.fdopen(answer_fd, "wb") as out:
            out.write(json.dumps(answer).encode())
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status & 0xFF)
