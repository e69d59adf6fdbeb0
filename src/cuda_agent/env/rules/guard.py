"""Runtime defences around the candidate's forward pass (inside the candidate's process).

- `NativeGuard`: the harness's own C++ helper (native/guard.cpp, loaded with ctypes before any
  candidate code). A global RecordFunction callback sees every PyTorch operator dispatched while a
  forward runs, from Python, from the solution's C++ and from any thread: operators outside a small
  allowlist of allocation, views and metadata are refused (rule `torch-op`), copies of the forward's
  inputs are the task done by PyTorch (rule `data-movement`). It is present in every call alike,
  timed or not, so no call can tell that it is watched.
- `ExtensionProxy`: wraps the solution's compiled modules, counts calls into them in the native
  guard's record (a decoy kernel that is never called is rejected; a forward that calls its kernels a
  different number of times while timed is noticed) and tells the guard which storages the kernels
  took and returned: the forward's outputs must be among them (`NativeGuard.check_outputs`).
- `check_output`, `poison_allocator`, `InputSentinel`: structural checks of each call.

The guard notes; it does not judge. Its record (native/guard.cpp's `cag_report`) is read and judged
by the harness from outside this process after every call (call_verdict.py), as are the threads.
"""

from __future__ import annotations

import ctypes
import types
from pathlib import Path
from typing import Any

import torch

from cuda_agent.env.rules import registry as rules
from cuda_agent.env.rules.samples import random_positions
from cuda_agent.env.rules.verify import tensors_in

ALLOWED_OPS = frozenset({
    # allocation
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "zeros", "zeros_like",
    "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones", "new_full", "scalar_tensor",
    "lift_fresh", "fill_", "zero_", "resize_", "record_stream", "empty_permuted",
    # views and metadata
    "view", "_unsafe_view", "reshape", "permute", "transpose", "t", "expand", "squeeze", "unsqueeze",
    "flatten", "unflatten", "select", "slice", "narrow", "as_strided", "alias", "detach", "split",
    "split_with_sizes", "chunk", "unbind", "view_as", "movedim", "contiguous", "_local_scalar_dense",
    "sym_size", "sym_stride", "sym_numel", "sym_storage_offset", "is_contiguous", "size", "stride",
    "dim", "numel", "is_same_size", "_reshape_alias", "item", "is_nonzero", "_has_compatible_shallow_copy_type",
    "set_", "is_pinned", "_nested_tensor_from_mask_left_aligned",
})
# Copies: allowed unless they copy the forward's inputs (data movement) or convert dtype/device.
COPY_OPS = frozenset({"copy_", "clone", "_to_copy", "lift_fresh_copy", "_copy_from", "_copy_from_and_resize"})
BUILTIN_NAMESPACES = frozenset({"aten", "prims", "prim", "_c10d_functional", "c10d", "quantized", "inductor",
                                "profiler", "_c10d_functional_autograd"})

GUARD_SOURCE = Path(__file__).parent / "native" / "guard.cpp"


def pytorch_namespaces() -> frozenset[str]:
    """PyTorch's operator namespaces: BUILTIN_NAMESPACES and every one registered in this process so far. Read
    when the guard is made, before any of the solution's code runs, so that an operator of PyTorch's own outside
    `aten` (`mkl::_mkl_linear`, `mkldnn_prepacked::conv2d_run`, ...) is judged as PyTorch's, never counted as
    one of the solution's custom operators."""
    return BUILTIN_NAMESPACES | {name.split("::", 1)[0] for name in torch._C._dispatch_get_all_op_names()}


class Rejected(Exception):
    """The candidate broke a rule; `rule` is its registered name, the message one line for the agent."""

    def __init__(self, rule: rules.Rule | str, message: str):
        super().__init__(message)
        self.rule = rules.name_of(rule)   # a name the native guard reports must be registered too


def build_guard(cache_dir: Path) -> Path:
    """The guard library, built once per toolchain by the harness and kept in its cache."""
    from cuda_agent.env.builds.compiler import build_native_library

    return build_native_library("cuda_agent_guard", GUARD_SOURCE.read_text(), Path(cache_dir))


class NativeGuard:
    def __init__(self, library: Path):
        self.lib = ctypes.CDLL(str(library))
        self.lib.cag_ops_seen.restype = ctypes.c_int64
        self.lib.cag_add_kernel_storage.argtypes = [ctypes.c_int64]
        self.lib.cag_install(",".join(sorted(ALLOWED_OPS)).encode(), ",".join(sorted(COPY_OPS)).encode(),
                             ",".join(sorted(pytorch_namespaces())).encode())
        self.lib.cag_recording_address.restype = ctypes.c_void_p
        self._recording = memoryview((ctypes.c_uint8 * 1).from_address(self.lib.cag_recording_address())).cast("B")
        # the record's count of extension calls: a plain store per call (a ctypes call costs microseconds)
        self.lib.cag_extension_calls_address.restype = ctypes.c_void_p
        self.extension_count = memoryview((ctypes.c_int64 * 1).from_address(
            self.lib.cag_extension_calls_address())).cast("B").cast("q")
        # (args, kwargs, result) of each call into the compiled modules during a forward, kept alive
        # (so no storage is reused under another tensor) and turned into kernel storages by `end`,
        # outside the timed region: noting them during the call cost more host time than many kernels
        self.extension_calls: list[tuple] = []
        self.active = False

    def begin(self, inputs: list) -> None:
        """Before a call: the inputs it gets (copying their memory is data movement), a clean record."""
        ranges = [bound for t in tensors_in(inputs) for bound in _storage_range(t)]
        array = (ctypes.c_int64 * len(ranges))(*ranges)
        self.lib.cag_begin(array, len(ranges) // 2)
        self.extension_calls.clear()
        self.active = True

    def watching(self, fn):
        """`fn` with recording on exactly while it runs (inside the timed region: two byte stores)."""
        recording = self._recording

        def watched(*args):
            recording[0] = 1
            try:
                return fn(*args)
            finally:
                recording[0] = 0
        return watched

    def end(self) -> None:
        self.lib.cag_end()
        for call in self.extension_calls:   # after the clock: the storages the extension calls held
            self.note_kernel_tensors(call)
        self.extension_calls.clear()
        self.active = False

    def ops_seen(self) -> int:
        return int(self.lib.cag_ops_seen())

    def note_kernel_tensors(self, value: Any) -> None:
        for t in tensors_in(value):
            self.lib.cag_add_kernel_storage(_storage(t))

    def check_outputs(self, out: Any) -> None:
        """After a call: its non-empty output tensors checked against the kernel storages, into the
        record (the harness judges the counts)."""
        storages = [_storage(t) for t in tensors_in(out) if t.numel()]
        self.lib.cag_check_outputs((ctypes.c_int64 * len(storages))(*storages), len(storages))


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):  # meta or sparse: no storage to track
        return 0


def _storage_range(t: torch.Tensor) -> tuple[int, int]:
    """The bytes of `t`'s storage, [first, one past the last); (0, 0) when it has none."""
    try:
        storage = t.untyped_storage()
        start = int(storage.data_ptr())
        return (start, start + int(storage.nbytes())) if start else (0, 0)
    except (RuntimeError, NotImplementedError):  # meta or sparse: no storage to track
        return 0, 0


class ExtensionCounter:
    """The guard the extension proxies count into (None while the guard is off)."""

    def __init__(self):
        self.guard: NativeGuard | None = None


COUNTER = ExtensionCounter()


class ExtensionProxy(types.ModuleType):
    """Stands in for a compiled extension module; every call through it is counted, and the tensors
    it takes and returns are kernel storages (where a forward's outputs must come from)."""

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
                guard = COUNTER.guard
                if guard is not None:
                    guard.extension_count[0] += 1
                result = __fn(*args, **kwargs)
                if guard is not None:   # noted after the clock stops (NativeGuard.end)
                    guard.extension_calls.append((args, kwargs, result))
                return result

            counted.__name__ = getattr(value, "__name__", name)
            counted.__doc__ = getattr(value, "__doc__", None)
            value = counted
        cache[name] = value
        return value

    def __dir__(self):
        return dir(object.__getattribute__(self, "_target"))


# ---------------------------------------------------------------------------------------------


def warm_harness_threads(device: torch.device) -> None:
    """Start PyTorch's own thread pools now, before the snapshot of harness threads."""
    x = torch.randn(1 << 22)
    (x * 2).sum()
    torch.get_num_threads()
    if device.type == "cuda":
        torch.randn(1 << 16, device=device).sum().item()


class InputSentinel:
    """Whether a call left its inputs unchanged: bit for bit against a pristine copy (`full`), or at
    positions drawn before the call (cheap enough for every timed call)."""

    SAMPLES = 4096

    def __init__(self, inputs: list, full: bool):
        self.full = full
        self.tensors = tensors_in(inputs)
        if full:
            self.copies = [t.detach().clone() for t in self.tensors]
        else:
            self.copies = []
            for t in self.tensors:
                flat = t.detach().reshape(-1)
                n = flat.numel()
                if n == 0:
                    self.copies.append(None)
                    continue
                pos = random_positions(n, self.SAMPLES, t.device)
                self.copies.append((pos, flat[pos].clone()))

    def changed(self) -> bool:
        for t, kept in zip(self.tensors, self.copies):
            if kept is None:
                continue
            if self.full:
                if not _same(t, kept):
                    return True
            else:
                pos, values = kept
                if not _same(t.detach().reshape(-1)[pos], values):
                    return True
        return False


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}   # an integer view per element size
_CHUNK = 1 << 26   # elements compared at once: a 6 GiB input needs no temporaries of its size


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit for bit (a NaN equals itself), in chunks where both are contiguous."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    bits = _BITS.get(a.element_size())
    if bits is not None and not a.is_complex() and a.is_contiguous() and b.is_contiguous():
        a, b = a.reshape(-1).view(bits), b.reshape(-1).view(bits)
        return all(torch.equal(a[i:i + _CHUNK], b[i:i + _CHUNK]) for i in range(0, a.numel(), _CHUNK))
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
    per call). Done before every call alike, so nothing tells one call from another."""
    if device.type != "cuda":
        return
    index = device.index or 0
    if index not in _POISON_FLOATS:
        free, _ = torch.cuda.mem_get_info(device)
        _POISON_FLOATS[index] = min(free // 4, 2 << 30) // 4
    big = torch.empty(_POISON_FLOATS[index], device=device).fill_(float("nan"))
    small = [torch.empty(1 << 17, device=device).fill_(float("nan")) for _ in range(32)]  # small-block pool
    del big, small


def check_output(out: Any, args: list, device: torch.device) -> None:
    tensors = tensors_in(out)
    if not tensors and not isinstance(out, (int, float, bool)):
        raise Rejected(rules.OUTPUT_TYPE, f"forward returned {type(out).__name__}, not a tensor")
    # by memory, not by storage object: a tensor made over an input's bytes (torch::from_blob) is that input
    input_ranges = [_storage_range(t) for t in tensors_in(args) if t.numel()]
    for t in tensors:
        if type(t) is not torch.Tensor:
            raise Rejected(rules.OUTPUT_TYPE, f"forward returned a {type(t).__name__}, not a plain torch.Tensor")
        if t.layout != torch.strided or t.is_meta:
            raise Rejected(rules.OUTPUT_TYPE, "forward returned a tensor without real storage")
        if t.device.type != device.type:
            raise Rejected(rules.OUTPUT_TYPE, f"forward returned a tensor on {t.device}, expected {device.type}")
        lo, hi = _storage_range(t)
        if t.numel() and any(lo < end and start < hi for start, end in input_ranges):
            raise Rejected(rules.OUTPUT_TYPE, "forward returned (a view of) one of its inputs instead of a new tensor")
