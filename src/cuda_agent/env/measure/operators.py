"""Where a forward's time goes: torch.profiler's table of its operators or kernels, for feedback.

A worker runs it on calls of its own after every timed call is over (evaluation.py), so the
profiler's overhead reaches no time the speedups or the reward read. A row is one operator (an ATen
op, a solution's extension function) or one CUDA kernel, with its self time per forward.
"""

from __future__ import annotations

import ctypes
import re
from typing import Callable

# how torch.profiler's Python tracer names a call of a pybind11 function (an extension's)
_EXTENSION_CALL = re.compile(r"^<built-in method (\w+) of (?:pybind11|PyCapsule)")
NAME_CHARS = 160   # a row's name at most (C++ kernel names can run to kilobytes)
# Heap mapped before a CPU profile: the profiler's records, allocated between a forward's tensors, split the
# blocks the tensors freed, so without it each profiled call's tensors land on fresh pages and fault on their
# first touch (twice the time of a timed call for a 2 MiB output). Chunks under the CPU workers' mmap threshold
# (isolation.STEADY_HEAP) come from the heap and stay mapped once freed.
SETTLED_HEAP_BYTES = 64 << 20
HEAP_CHUNK_BYTES = 8 << 20


def extension_functions(modules: dict[str, object]) -> dict[str, str]:
    """Each extension function's name -> "module.function", for the modules a solution loaded
    (`InlineBuilder.modules`: proxies whose `_target` is the compiled module)."""
    names = {}
    for module_name, proxy in modules.items():
        target = getattr(proxy, "_target", proxy)
        for name in dir(target):
            if not name.startswith("_") and callable(getattr(target, name, None)):
                names[name] = f"{module_name}.{name}"
    return names


def profile_forward(forward: Callable[[], object], device, calls: int = 3, rows: int = 8,
                    kernels: bool = False, extensions: dict[str, str] | None = None) -> dict:
    """torch.profiler over `calls` calls of `forward()` (one more first, unprofiled, to warm it):
    the `rows` largest by self time per forward. On a GPU the time is the device's (CUDA activity)
    and the rows are operators, or with `kernels` the kernels themselves; on the CPU it is the
    operators' CPU time (the heap mapped first, `settle_heap`), and `extensions` (from
    `extension_functions`) names the extension calls, which the Python tracer records. Returns `{"clock", "calls", "total_ms", "rows"}`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from cuda_agent.env.measure.timing import device_synchronize

    gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    if not gpu:
        settle_heap()
    with torch.no_grad():
        forward()
        device_synchronize(device)
        with profile(activities=activities, with_stack=bool(extensions) and not gpu) as prof:
            for _ in range(calls):
                forward()
            device_synchronize(device)
    events = prof.key_averages()
    if gpu:
        found = _kernel_rows(events) if kernels else _op_rows(events, _device_self_us)
    else:
        found = _op_rows(events, lambda e: e.self_cpu_time_total, extensions or {})
    return table(found, "cuda" if gpu else "cpu", calls, rows)


def settle_heap(total: int = SETTLED_HEAP_BYTES, chunk: int = HEAP_CHUNK_BYTES) -> None:
    """Maps `total` bytes of the C heap (allocated in chunks, written, freed) so that the profiled calls'
    tensors reuse mapped pages; libc's own calls, no ATen operator."""
    libc = ctypes.CDLL(None)
    libc.malloc.argtypes, libc.malloc.restype = (ctypes.c_size_t,), ctypes.c_void_p
    libc.memset.argtypes, libc.memset.restype = (ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t), ctypes.c_void_p
    libc.free.argtypes, libc.free.restype = (ctypes.c_void_p,), None
    blocks = [libc.malloc(chunk) for _ in range(total // chunk)]
    for block in blocks:
        if block:
            libc.memset(block, 0, chunk)
    for block in blocks:
        libc.free(block)


def table(found: list[tuple[str, str, float, int]], clock: str, calls: int, rows: int) -> dict:
    """The table of (name, kind, self microseconds over all calls, count) rows: per forward, in
    milliseconds, the largest first; `total_ms` sums every row, shown or not."""
    merged: dict[tuple[str, str], list[float]] = {}   # the profiler may list one name in several rows
    for name, kind, us, count in found:
        if us > 0:
            row = merged.setdefault((name, kind), [0.0, 0])
            row[0], row[1] = row[0] + us, row[1] + count
    found = sorted(((name, kind, us, count) for (name, kind), (us, count) in merged.items()), key=lambda row: -row[2])
    total = sum(row[2] for row in found)
    return {"clock": clock, "calls": calls, "total_ms": total / 1e3 / calls,
            "rows": [{"name": name[:NAME_CHARS], "kind": kind, "ms": us / 1e3 / calls, "calls": count / calls}
                     for name, kind, us, count in found[:rows]]}


def _device_self_us(event) -> float:
    value = getattr(event, "self_device_time_total", None)
    return value if value is not None else getattr(event, "self_cuda_time_total", 0.0)


def _is_cpu_event(event) -> bool:
    return str(getattr(event, "device_type", "CPU")).endswith("CPU")


def _op_rows(events, self_us, extensions: dict[str, str] | None = None) -> list[tuple[str, str, float, int]]:
    """Operators (names with a namespace, `aten::mm`) and extension calls; Python frames and other
    tracer events are left out (their self time is the interpreter's)."""
    rows = []
    for event in events:
        if not _is_cpu_event(event):
            continue
        call = _EXTENSION_CALL.match(event.key)
        if call and extensions and call.group(1) in extensions:
            rows.append((extensions[call.group(1)], "extension", self_us(event), event.count))
        elif "::" in event.key and " " not in event.key:
            rows.append((event.key, "op", self_us(event), event.count))
    return rows


def _kernel_rows(events) -> list[tuple[str, str, float, int]]:
    """The device's own events: kernels, copies and sets (`Memcpy HtoD`), by name."""
    return [(event.key, "kernel", _device_self_us(event), event.count)
            for event in events if not _is_cpu_event(event)]
