"""How much memory a task's tensors take, found without allocating them.

The task runs on PyTorch's `meta` device: `get_inputs()`, the model's construction and its forward
produce tensors that have shapes and dtypes but no storage, so a 6 GB input costs nothing to
measure. Tasks that meta cannot run (data-dependent shapes, `.item()`, explicit devices) fall back
to what could be measured, or to no estimate at all. The task's code runs in a child process, never
the harness's (env/infra/task_child.py).
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field

from cuda_agent.tasks.layout import value_layout
from cuda_agent.tasks.task import Task, load_task_module

_counter = itertools.count()


@dataclass(frozen=True)
class Footprint:
    input_bytes: int                 # one input set
    output_bytes: int | None         # one output; None when the forward could not run on meta
    param_bytes: int | None          # weights and buffers; None when the model could not be built
    # the inputs' layout (tasks/layout.py): dtypes and shapes, no values; the harness's, not in comparisons
    input_layout: dict | None = field(default=None, compare=False)

    @property
    def forward_ran(self) -> bool:
        return self.output_bytes is not None


def tensor_bytes(value) -> int:
    """Bytes of every tensor inside `value` (nested lists, tuples and dicts)."""
    import torch

    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (list, tuple)):
        return sum(tensor_bytes(v) for v in value)
    if isinstance(value, dict):
        return sum(tensor_bytes(v) for v in value.values())
    return 0


def measure_footprint(task: Task) -> Footprint | None:
    """Input, output and weight bytes of `task`, or None when not even its inputs can be measured,
    measured in this process: it runs the task's code, so only in a process of its own (a task's exit
    or crash is that process's). A harness asks env/infra/task_child.py's `estimate_footprint`, which
    runs this in a child."""
    import torch

    name = f"_cuda_agent_footprint_{next(_counter)}"
    try:
        with torch.device("meta"):
            try:
                module = load_task_module(task.code, name, task.origin or task.name)
                inputs = module.get_inputs()
                init = module.get_init_inputs()
            except Exception:
                return None
            input_bytes = tensor_bytes(inputs)
            input_layout = value_layout(inputs)[0]
            try:
                model = module.Model(*init)
                param_bytes = sum(tensor_bytes(t) for t in itertools.chain(model.parameters(), model.buffers()))
            except Exception:
                return Footprint(input_bytes, None, None, input_layout)
            try:
                with torch.no_grad():
                    output_bytes = tensor_bytes(model(*inputs))
            except Exception:
                output_bytes = None
        return Footprint(input_bytes, output_bytes, param_bytes, input_layout)
    finally:
        sys.modules.pop(name, None)


def human_bytes(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"
