"""Whether a program's model builds and its forward runs on PyTorch's `meta` device (shapes and dtypes,
no storage, no compute), and whether that forward returns a tensor: the shape check of a composed
candidate (synth/llm.py). It runs the program's code, so only in a process of its own: the synthesis
asks env/infra/task_child.py (`measured("shape", ...)`), which runs `check_shapes` in a child.
"""

from __future__ import annotations

import itertools
import sys
import warnings
from dataclasses import dataclass

from cuda_agent.tasks.task import Task, load_task_module

_counter = itertools.count()


@dataclass(frozen=True)
class ShapeCheck:
    error: str | None       # what building the model or its forward raised ("RuntimeError: ..."), else None
    returns_tensor: bool    # the forward's output, or the first item of a tuple or list it returns, is a tensor


def check_shapes(task: Task) -> ShapeCheck:
    """`task`'s module run, its Model built from get_init_inputs() and called on get_inputs(), all on
    meta, in this process; an exception there is the result's `error`."""
    import torch

    name = f"_cuda_agent_shapes_{next(_counter)}"
    try:
        with warnings.catch_warnings(), torch.device("meta"):
            warnings.simplefilter("ignore")   # a warning's text would be the child's last output
            module = load_task_module(task.code, name, task.origin or task.name)
            model = module.Model(*module.get_init_inputs())
            out = model(*module.get_inputs())
    except Exception as exc:  # noqa: BLE001 - any failure of the program is the check's answer
        return ShapeCheck(f"{type(exc).__name__}: {str(exc)[:200]}", False)
    finally:
        sys.modules.pop(name, None)
    if isinstance(out, (tuple, list)):
        out = out[0] if out else None
    return ShapeCheck(None, isinstance(out, torch.Tensor))
