"""The C library's heap fill (glibc's `M_PERTURB`) in the candidate's process: on for verification
calls, off for every other call.

With the fill on, every heap block is filled as it is allocated, so an output a kernel leaves partly
unwritten holds garbage, never plausible values: verification needs that. A timed call must not
carry it: it costs a memset of every allocation, the candidate's process can turn it off for itself
(`mallopt`), and the judge times eager without it. So no call's time depends on it, whoever sets it.
Timed calls' outputs are still checked at sampled positions against their own draws, which stale
values fail. What the fill tells a solution (this is a verification call) its place in the schedule
tells it already; every call's output is checked."""

from __future__ import annotations

import ctypes

M_PERTURB = -6      # glibc's mallopt parameter (malloc.h)
FILL_BYTE = 165     # the byte MALLOC_PERTURB_ names in the candidate's environment (isolation.worker_env)

_mallopt = ctypes.CDLL(None).mallopt   # bound before candidate code runs
_mallopt.argtypes, _mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int


def set_heap_fill(on: bool) -> None:
    """Set the fill for the coming call (every call: the candidate may have changed it since)."""
    if _mallopt(M_PERTURB, FILL_BYTE if on else 0) != 1:
        raise RuntimeError("mallopt(M_PERTURB) failed: not glibc's allocator?")
