"""What an empty call reads and writes on the CPU backend: what a real forward does to the caches at least.

A real forward reads its inputs and writes its output; the harness's steps after it (locating the
output, answering, the checks of `finish`) then run with the interpreter's working set pushed out of the
core's caches, and cost more than after an empty call that touched nothing. The harness takes its
empty calls' measure off every real call (run/measures.py), so an empty call that left the caches warm
would take off too little, a constant added to every CPU kernel's time that pulls its speedups toward 1.
The empty call therefore reads the inputs' bytes and writes as many bytes as the reference's output
holds, with the C library's memmove and memset (no ATen operator, so no guard record), and times that
on its thread's CPU clock (the answer's `ms`). The twin's (run/twin.py), where no solution runs, is taken
off its own measure and off the candidate's empty call on the same draw; the candidate's is not read.
"""

from __future__ import annotations

import ctypes

import torch

from cuda_agent.env.rules.verify import tensors_in

READ_CHUNK = 256 << 10   # the inputs are read through a buffer this size, which stays in the core's cache
# at most this much read and as much written: it already pushes the harness's working set out of a core's own
# caches and most of a last-level cache, and a larger task's forward dwarfs what a colder cache would add
LIMIT = 64 << 20

_memmove = ctypes.memmove   # bound before any of a solution's code runs
_memset = ctypes.memset


class MemoryTouch:
    """The buffers an empty call reads into and writes, kept between calls as a real forward's
    allocations are reused."""

    def __init__(self):
        self.scratch = torch.empty(READ_CHUNK, dtype=torch.uint8)
        self.output: torch.Tensor | None = None

    def touch(self, inputs, output_bytes: int) -> None:
        """Read the bytes every CPU input tensor spans, then write `output_bytes` bytes (each at most LIMIT)."""
        scratch, budget = self.scratch.data_ptr(), LIMIT
        for t in tensors_in(inputs):
            if t.device.type != "cpu" or t.layout != torch.strided or not t.numel():
                continue
            start, size = t.data_ptr(), min(_span_bytes(t), budget)
            for offset in range(0, size, READ_CHUNK):
                _memmove(scratch, start + offset, min(READ_CHUNK, size - offset))
            budget -= size
        output_bytes = min(output_bytes, LIMIT)
        if output_bytes > 0:
            if self.output is None or self.output.numel() != output_bytes:
                self.output = torch.empty(output_bytes, dtype=torch.uint8)
            _memset(self.output.data_ptr(), 0, output_bytes)


def _span_bytes(t: torch.Tensor) -> int:
    """The bytes from a tensor's first element to its last (its view's, not its storage's: staged inputs
    are views of one shared file)."""
    return (1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))) * t.element_size()
