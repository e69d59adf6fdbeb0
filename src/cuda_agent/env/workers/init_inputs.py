"""The task's init inputs (`get_init_inputs()`), drawn by the judge for the reference's model and by the
candidate for its own model made early (candidate.py `make_early_model`), and whether two draws agree."""

from __future__ import annotations

import torch


def draw_init_inputs(module) -> list:
    init = module.get_init_inputs()
    if not isinstance(init, (list, tuple)):
        raise TypeError(f"get_init_inputs() must return a list, got {type(init).__name__}")
    return list(init)


def same_value(a, b) -> bool:
    """Whether two init inputs are the same value: tensors element for element (with dtype and shape),
    lists, tuples and dicts item by item, anything else by type and `==`; False where a comparison fails."""
    if type(a) is not type(b):
        return False
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and bool(torch.equal(a.cpu(), b.cpu()))
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    try:
        return bool(a == b)
    except Exception:   # an object whose comparison fails or is ambiguous
        return False
