"""A value's layout: the tree of lists, dicts, tensors (dtype and shape) and plain values that
describes a task's inputs or a model's output, so that its tensors can travel as bytes and be put
back together (env/workers/transfer.py). Works on the meta device too (tasks/footprint.py)."""

from __future__ import annotations

from typing import Any

import torch


def value_layout(value: Any) -> tuple[dict, list[torch.Tensor]]:
    """(layout, the tensors of `value` in the layout's order)."""
    tensors: list[torch.Tensor] = []
    return _layout(value, tensors), tensors


# A module-level function, not a closure: a recursive closure is a reference cycle that keeps the
# tensors it collected alive until the garbage collector runs (the judge's heap then grows call by call).
def _layout(v: Any, tensors: list[torch.Tensor]) -> dict:
    if isinstance(v, torch.Tensor):
        tensors.append(v)
        return {"tensor": str(v.dtype).removeprefix("torch."), "shape": list(v.shape)}
    if isinstance(v, (list, tuple)):
        return {"list": [_layout(x, tensors) for x in v]}
    if isinstance(v, dict):
        return {"dict": [[k if isinstance(k, (str, int)) else str(k), _layout(x, tensors)] for k, x in v.items()]}
    if v is None or isinstance(v, (bool, int, float)):
        return {"value": v}
    return {"other": type(v).__name__}
