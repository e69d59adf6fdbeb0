"""Runtime defences around the candidate's forward pass (inside the candidate's process).

- `OpGuard`: a dispatch-level mode that refuses every ATen operator outside a small allowlist
  (allocation, views, metadata). It sees `torch.*`, tensor methods, `F.*`, `nn` layers and also
  ATen calls made from the solution's C++ binding, because they all pass the dispatcher. A refused
  op raises *and* is recorded, so a `try/except` fallback is caught anyway.
- `ExtensionProxy`: wraps the solution's compiled modules and counts calls into them, so a decoy
  kernel that is compiled but never called is rejected, and a forward that behaves differently
  while timed than while verified is noticed.
- `checked_forward`: one guarded call with the structural checks: inputs unchanged, outputs plain
  tensors on the right device not aliasing inputs, no Python thread left running, and the
  allocator's free memory filled with NaN so stale memory never passes.
"""

from __future__ import annotations

import threading
import types
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ALLOWED_OPS = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor",
    "lift_fresh", "lift_fresh_copy", "fill_", "zero_", "resize_", "record_stream",
    # views and metadata
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
    "flatten", "unflatten", "select", "slice", "narrow", "as_strided", "alias", "detach", "split",
    "split_with_sizes", "chunk", "unbind", "view_as", "movedim", "clone", "contiguous", "_local_scalar_dense",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "size", "stride",
    "dim", "numel", "is_same_size", "_reshape_alias", "copy_",
})
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "quantized", "inductor"})


class Rejected(Exception):
    """The candidate broke a rule; `rule` names it, the message is one line for the agent."""

    def __init__(self, rule: str, message: str):
        super().__init__(message)
        self.rule = rule


class OpGuard(TorchDispatchMode):
    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # By default PyTorch wraps a mode's __torch_dispatch__ in torch._dynamo.disable, importing
        # torch._dynamo on the first call (1.5 s on a CPU host, ~5 s on a GPU host, inside the
        # verify clock). The guard never meets dynamo: torch.compile is rejected statically.
        return False

    def __init__(self):
        super().__init__()
        self.violations: list[str] = []
        self.custom_op_calls = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        namespace = func.namespace
        name = func.overloadpacket.__name__
        if namespace not in BUILTIN_NAMESPACES:
            # An operator registered by the solution (TORCH_LIBRARY). The mode is popped while an op
            # runs, so its kernel is run with the guard pushed again: PyTorch compute inside is seen.
            self.custom_op_calls += 1
            cuda = any(isinstance(a, torch.Tensor) and a.is_cuda for a in args)
            key = torch._C.DispatchKey.CUDA if cuda else torch._C.DispatchKey.CPU
            with self:
                return func.redispatch(torch._C.DispatchKeySet(key), *args, **kwargs)
        if name in ALLOWED_OPS and not (name == "copy_" and _converts(args)):
            return func(*args, **kwargs)
        op = f"{namespace}::{func._schema.name.split('::')[-1]}"
        self.violations.append(op)
        raise Rejected("torch-op", f"forward called the PyTorch operator {op}; only the solution's own "
                                   "kernels may compute (allocation and views are allowed)")


def _converts(args) -> bool:
    """copy_ between dtypes or devices is a computation (or a CPU fallback), not a plain copy."""
    dst, src = args[0], args[1]
    return isinstance(src, torch.Tensor) and (src.dtype != dst.dtype or src.device != dst.device)


class ExtensionCounter:
    def __init__(self):
        self.calls = 0


COUNTER = ExtensionCounter()


class ExtensionProxy(types.ModuleType):
    """Stands in for a compiled extension module; every call through it is counted."""

    def __init__(self, module: types.ModuleType):
        super().__init__(module.__name__, getattr(module, "__doc__", None))
        object.__setattr__(self, "_wrapped_cache", {})
        object.__setattr__(self, "_target", module)

    def __getattr__(self, name: str):
        cache = object.__getattribute__(self, "_wrapped_cache")
        if name in cache:
            return cache[name]
        value = getattr(object.__getattribute__(self, "_target"), name)
        if callable(value) and not isinstance(value, type):
            def counted(*args, __fn=value, **kwargs):
                COUNTER.calls += 1
                return __fn(*args, **kwargs)

            counted.__name__ = getattr(value, "__name__", name)
            counted.__doc__ = getattr(value, "__doc__", None)
            value = counted
        cache[name] = value
        return value

    def __dir__(self):
        return dir(object.__getattribute__(self, "_target"))


# ---------------------------------------------------------------------------------------------


def tensors_in(value: Any) -> list[torch.Tensor]:
    """Every tensor inside (nested) lists, tuples and dicts."""
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in tensors_in(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in tensors_in(v)]
    return []


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if a.dtype.is_floating_point:  # NaNs never compare equal: compare bit patterns instead
        return torch.equal(torch.nan_to_num(a, nan=1.2345e-7), torch.nan_to_num(b, nan=1.2345e-7))
    return False


_POISON_FLOATS: dict[int, int] = {}


def poison_allocator(device: torch.device) -> None:
    """Leave the CUDA caching allocator's free memory filled with NaN, so an `empty` output that a
    kernel does not fully write never holds plausible stale values. (On the CPU, MALLOC_PERTURB_
    in the candidate's environment does the same for the heap; fresh pages are zero.)

    The block is sized once and then refilled from the allocator's cache (no new device memory
    per call). Nothing observable from Python changes, unlike torch's deterministic fill mode,
    which a candidate could query to tell verification from timing."""
    if device.type != "cuda":
        return
    index = device.index or 0
    if index not in _POISON_FLOATS:
        free, _ = torch.cuda.mem_get_info(device)
        _POISON_FLOATS[index] = min(free // 4, 2 << 30) // 4
    big = torch.empty(_POISON_FLOATS[index], device=device).fill_(float("nan"))
    small = [torch.empty(1 << 17, device=device).fill_(float("nan")) for _ in range(32)]  # small-block pool
    del big, small


def checked_forward(model, args: list, pristine: list, device: torch.device, guard: bool = True):
    """One verified call: returns (output, calls through the extension modules). Raises `Rejected`."""
    threads_before = {t.ident for t in threading.enumerate()}
    calls_before = COUNTER.calls
    op_guard = OpGuard() if guard else None
    poison_allocator(device)
    try:
        if op_guard is not None:
            with op_guard:
                out = model(*args)
        else:
            out = model(*args)
    except Rejected:
        raise
    except Exception:
        if op_guard is not None and op_guard.violations:
            raise Rejected("torch-op", f"forward called the PyTorch operator {op_guard.violations[0]} "
                                       "(and caught the error); only the solution's own kernels may compute")
        raise
    if op_guard is not None and op_guard.violations:
        raise Rejected("torch-op", f"forward called the PyTorch operator {op_guard.violations[0]} "
                                   "(and caught the error); only the solution's own kernels may compute")
    calls = COUNTER.calls - calls_before  # through the module proxies, counted while timed too
    if guard and calls + op_guard.custom_op_calls == 0:
        raise Rejected("no-custom-kernel", "forward never called the solution's compiled extension: "
                                           "the output must come from your own kernels")
    leftover = [t for t in threading.enumerate() if t.ident not in threads_before and t.is_alive()]
    if leftover:
        raise Rejected("background-thread", f"forward left a thread running ({leftover[0].name}); "
                                            "all work must finish inside forward")
    # Outputs are inspected right away, before any synchronisation of our own: work left on a side
    # stream shows up as a wrong output when it is copied on the current stream.
    check_output(out, args, device)
    for given, original in zip(tensors_in(args), tensors_in(pristine)):
        if not _same(given, original):
            raise Rejected("input-mutation", "forward modified one of its input tensors; inputs must be left unchanged")
    return out, calls


def check_output(out: Any, args: list, device: torch.device) -> None:
    tensors = tensors_in(out)
    if not tensors and not isinstance(out, (int, float, bool)):
        raise Rejected("output-type", f"forward returned {type(out).__name__}, not a tensor")
    input_storages = {t.untyped_storage().data_ptr() for t in tensors_in(args) if t.numel()}
    for t in tensors:
        if type(t) is not torch.Tensor:
            raise Rejected("output-type", f"forward returned a {type(t).__name__}, not a plain torch.Tensor")
        if t.layout != torch.strided or t.is_meta:
            raise Rejected("output-type", "forward returned a tensor without real storage")
        if t.device.type != device.type:
            raise Rejected("output-type", f"forward returned a tensor on {t.device}, expected {device.type}")
        if t.numel() and t.untyped_storage().data_ptr() in input_storages:
            raise Rejected("output-type", "forward returned (a view of) one of its inputs instead of a new tensor")
