"""What the judge and the candidate worker share: their device, a failure's short traceback, and the
per-call trace of CUDA_AGENT_TRACE_CALLS=1."""

from __future__ import annotations

import traceback

import torch

from cuda_agent.env.measure import timing  # captures clocks and sync before candidate code can patch them

# CUDA_AGENT_TRACE_CALLS=1: each call's steps and their wall times on the worker's log (diagnosis
# of the harness's own overhead; the harness never reads it). Set by main.main(): a forked judge's
# environment is set after this module was imported.
TRACE_CALLS = False
# CUDA_AGENT_TRACE_HEAP=1 (with TRACE_CALLS): the judge also counts its live tensors after each batch, a
# walk of every object of the process that takes tens of milliseconds; apart, so that the call traces
# time the harness as it runs untraced.
TRACE_HEAP = False


def device_of(backend: str) -> torch.device:
    return torch.device("cuda", 0) if backend == "cuda" else torch.device("cpu")


def short_traceback(exc: BaseException, limit_frames: int = 4) -> str:
    tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
    head, frames = tb[0], tb[1:-1]
    text = "".join([head, *frames[-limit_frames:], tb[-1]]) if len(tb) > 1 else "".join(tb)
    return text.strip()[-3000:]


def weights_seed(seed: int) -> int:
    """The seed the reference's and the candidate's weights are made under, from the evaluation's
    seed: the candidate is given this one, never the evaluation's, from which the verification
    calls' seeds follow (a one-way hash: it cannot draw their inputs in advance)."""
    import hashlib

    return int.from_bytes(hashlib.sha256(f"weights:{seed}".encode()).digest()[:8], "little") >> 33


class CallTrace:
    """Wall and main-thread CPU milliseconds per step of a call (on CUDA also the device memory the
    caching allocator has in use and holds, after the step)."""

    def __init__(self):
        self.start = self.last = timing._perf_counter()
        self.cpu_last = timing._thread_time()
        self.laps = []

    def lap(self, name, device):
        timing.device_synchronize(device)
        now, cpu = timing._perf_counter(), timing._thread_time()
        lap = f"{name}={(now - self.last) * 1e3:.3f} {name}_cpu={(cpu - self.cpu_last) * 1e3:.3f}"
        if getattr(device, "type", None) == "cuda":   # the caching allocator's bytes in use / held, GiB
            import torch

            lap += f" {name}_gib={torch.cuda.memory_allocated(device) / 2**30:.2f}/" \
                   f"{torch.cuda.memory_reserved(device) / 2**30:.2f}"
        self.laps.append(lap)
        self.last, self.cpu_last = now, cpu

    def __str__(self):
        return " ".join(self.laps) + f" total={(self.last - self.start) * 1e3:.3f}"


def trace() -> CallTrace | None:
    """A new call's trace, when tracing."""
    return CallTrace() if TRACE_CALLS else None
