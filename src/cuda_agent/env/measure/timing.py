"""Timing a forward pass: flushed caches, a synchronised start, events on the current stream.

The primitives (clock, device sync, event methods) are captured when this module is imported,
before any candidate code runs, so a candidate that monkeypatches `torch.cuda.synchronize`,
`torch.cuda.Event` or `time.perf_counter` cannot change what the harness measures.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

import torch

from cuda_agent.env.result import Timing

if TYPE_CHECKING:
    from cuda_agent.env.measure.hold import DeviceHold

_perf_counter = time.perf_counter
_thread_time = time.thread_time
_cuda_sync = getattr(torch._C, "_cuda_synchronize", None)
_EventBase = getattr(torch._C, "_CudaEventBase", None)
if not hasattr(_EventBase, "record"):  # CPU-only builds of torch have a stub
    _EventBase = None
_event_record = _EventBase.record if _EventBase is not None else None
_event_sync = _EventBase.synchronize if _EventBase is not None else None
_event_elapsed = _EventBase.elapsed_time if _EventBase is not None else None


def clone_args(value: Any) -> Any:
    """Deep copy of tensors inside lists/tuples/dicts, so every call gets its own buffers."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)):
        return type(value)(clone_args(v) for v in value)
    if isinstance(value, dict):
        return {k: clone_args(v) for k, v in value.items()}
    return value


def to_device(value: Any, device: torch.device) -> Any:
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def device_synchronize(device: torch.device) -> None:
    """Wait for all streams of the device (no-op on CPU)."""
    if device.type == "cuda":
        with torch.cuda.device(device):
            _cuda_sync()


class L2Flusher:
    """Writes a buffer twice the L2 size so each timed call starts with a cold cache."""

    def __init__(self, device: torch.device, enabled: bool):
        self.buffer = None
        if enabled and device.type == "cuda":
            l2 = torch.cuda.get_device_properties(device).L2_cache_size or (50 << 20)
            self.buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


def settle(seconds: float) -> None:
    """Let the (synchronised) device idle a fixed time, so every timed call, the candidate's and the
    baselines', starts from the same GPU state whatever ran before it (a spin: sleep overshoots)."""
    if seconds > 0:
        until = _perf_counter() + seconds
        while _perf_counter() < until:
            pass


def time_once(fn: Callable, args: list, device: torch.device, flush: "L2Flusher | None" = None,
              after: Callable[[Any], Any] | None = None, settle_s: float = 0.0,
              hold: "DeviceHold | None" = None, stamps: list | None = None,
              cpu_clock: Callable[[], float] | None = None) -> tuple[float, float | None, Any, Any]:
    """One timed call: (milliseconds, the host's milliseconds or None, output, after(output)).

    Caches flushed and the device synchronised first; on CUDA, events on the current stream
    (KernelBench's method: no device-wide sync inside the timed region). With a `hold` the events
    measure the device's work alone and the host's time to queue the forward comes beside it
    (hold.call_times weighs the two); unheld, the host's time is None. `after` runs right after the
    end event (and the hold's release), before anything waits for the device, so samples read there
    show work left running on another stream. `stamps` (diagnosis) gets (step, host clock) per step;
    `cpu_clock` is a CPU call's clock (default the wall clock)."""
    note = stamps.append if stamps is not None else (lambda _: None)
    if flush is not None:
        flush()
    device_synchronize(device)
    if device.type != "cuda":
        clock = cpu_clock or _perf_counter
        t0 = clock()
        out = fn(*args)
        ms = (clock() - t0) * 1e3
        return ms, None, out, after(out) if after else None
    note(("flushed", _perf_counter()))
    settle(settle_s)
    stream = torch.cuda.current_stream(device)
    start = _EventBase(enable_timing=True)
    end = _EventBase(enable_timing=True)
    if hold is not None:
        hold.hold(stream.cuda_stream)
    note(("held", _perf_counter()))
    try:
        _event_record(start, stream)
        t0 = _perf_counter()
        out = fn(*args)
        host_ms = (_perf_counter() - t0) * 1e3
        _event_record(end, stream)
    finally:
        if hold is not None:
            hold.release()
    note(("forward", _perf_counter()))
    extra = after(out) if after else None
    note(("after", _perf_counter()))
    _event_sync(end)
    device_ms = _event_elapsed(start, end)
    note(("synced", _perf_counter()))
    return device_ms, (host_ms if hold is not None else None), out, extra


def time_callable(fn: Callable, inputs: list[list], device: torch.device, *, warmup: int = 10,
                  iters: int = 100, flush_l2: bool = True, budget_s: float | None = None) -> Timing:
    """Median-of-many timing of trusted code (the synthesis filters) on fixed input sets, each call
    on a fresh copy of one of them. When one call is slow, fewer calls (at least 5) fit `budget_s`."""
    if not inputs:
        raise ValueError("time_callable needs at least one input set")
    flush = L2Flusher(device, flush_l2)
    samples = []
    with torch.no_grad():
        warm_start = _perf_counter()
        for i in range(max(1, warmup)):
            time_once(fn, clone_args(inputs[i % len(inputs)]), device)
            if budget_s and i >= 1 and _perf_counter() - warm_start > budget_s / 4:
                break
        per_call = (_perf_counter() - warm_start) / (i + 1)
        if budget_s and per_call * iters > budget_s:
            iters = max(5, int(budget_s / max(per_call, 1e-9)))
        for i in range(iters):
            ms, _, _, _ = time_once(fn, clone_args(inputs[i % len(inputs)]), device, flush)
            samples.append(ms)
    return Timing.from_samples(samples)
