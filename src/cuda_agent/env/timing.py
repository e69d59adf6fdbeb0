"""Timing a forward pass: warm-up, fresh input buffers per call, L2 flush, device-wide sync.

The primitives (clock, device sync, event methods) are captured when this module is imported,
before any candidate code runs, so a candidate that monkeypatches `torch.cuda.synchronize`,
`torch.cuda.Event` or `time.perf_counter` cannot change what the harness measures.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Any, Callable

import torch

from cuda_agent.env.result import Timing

_perf_counter = time.perf_counter
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


class _L2Flusher:
    """Writes a buffer twice the L2 size so each timed call starts with a cold cache."""

    def __init__(self, device: torch.device, enabled: bool):
        self.buffer = None
        if enabled and device.type == "cuda":
            l2 = torch.cuda.get_device_properties(device).L2_cache_size or (50 << 20)
            self.buffer = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)

    def __call__(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()


@dataclass
class TimingRun:
    timing: Timing
    last_output: Any      # output of the final timed call, for a correctness re-check
    last_draw: int        # which draw (call number) produced its inputs
    calls: int            # how many times fn was called (warm-up and spot checks included)


def _time_one_cuda(fn: Callable, args: list, device: torch.device) -> tuple[float, Any]:
    stream = torch.cuda.current_stream(device)
    start = _EventBase(enable_timing=True)
    end = _EventBase(enable_timing=True)
    _event_record(start, stream)
    out = fn(*args)
    _cuda_sync()              # inside the timed region: work on side streams is counted
    _event_record(end, stream)
    _event_sync(end)
    return _event_elapsed(start, end), out


def _time_one_cpu(fn: Callable, args: list) -> tuple[float, Any]:
    t0 = _perf_counter()
    out = fn(*args)
    return (_perf_counter() - t0) * 1e3, out


def time_callable(fn: Callable, draw: Callable[[int], list] | list[list], device: torch.device, *, warmup: int = 10,
                  iters: int = 100, flush_l2: bool = True, budget_s: float | None = None,
                  spot_check: Callable[[list, int], Any] | None = None, spot_checks: int = 0) -> TimingRun:
    """Median-of-many timing of `fn(*draw(n))`, where call number n gets inputs `draw(n)`.

    `draw` makes new tensors for every call (the harness draws each from its own secret seed), so
    no call sees the buffers or the values of another: caching by pointer, shape or value gains
    nothing, and any output can be re-checked against the reference for the same draw.
    When a single call is slow, the number of timed calls shrinks (to at least 5) to fit `budget_s`.
    `spot_check(args, n)` replaces `spot_checks` calls at secret random positions among the timed
    ones (they are not timed): a solution cannot tell those calls from timed ones.
    A list of input sets instead of `draw` cycles through fresh copies of them.
    """
    if not callable(draw):  # fixed input sets (trusted code, e.g. synthesis filters): cycle fresh copies
        if not draw:
            raise ValueError("time_callable needs at least one input set")
        input_sets = draw
        draw = lambda n: clone_args(input_sets[n % len(input_sets)])  # noqa: E731
    flush = _L2Flusher(device, flush_l2)
    one = (lambda a: _time_one_cuda(fn, a, device)) if device.type == "cuda" else (lambda a: _time_one_cpu(fn, a))
    n = 0
    with torch.no_grad():
        warm_start = _perf_counter()
        for i in range(max(1, warmup)):
            args = draw(n)
            n += 1
            device_synchronize(device)
            one(args)
            del args
            if budget_s and i >= 1 and _perf_counter() - warm_start > budget_s / 4:
                break
        warm_calls = i + 1
        per_call = (_perf_counter() - warm_start) / warm_calls
        if budget_s and per_call * iters > budget_s:
            iters = max(5, int(budget_s / max(per_call, 1e-9)))

        spots = set(random.SystemRandom().sample(range(iters), min(spot_checks, iters))) if spot_check else set()
        samples, out, last = [], None, 0
        for i in range(iters + len(spots)):
            args = draw(n)
            if i in spots:
                spot_check(args, n)
                n += 1
                continue
            last = n
            n += 1
            flush()
            device_synchronize(device)
            ms, out = one(args)
            samples.append(ms)
            del args
    return TimingRun(Timing.from_samples(samples), out, last, n)
