"""Device memory a judge asks for in its set-up, not inside its first batch of timed calls.

PyTorch's caching allocator asks CUDA for memory (cudaMalloc) the first time it has no free block of a
size, and cudaMalloc waits for the device: inside a held timed call it waited for the hold itself
(hold.py), until the hold's timeout: a judge's first batch of timed runs, each output new to the
allocator, then held the device's lock alone far longer than its forwards take (docs/benchmarks.md).

So the judge asks for what a batch holds at once, in one block, in its set-up's shared hold of the
lock: the allocator keeps the block when it is let go and splits it for the tensors that follow. Never
without the lock: memory asked for while another evaluation's call was timed slowed that call (the
same session: a small kernel's times spread 8-19 % instead of 1 % when the workers asked for theirs
without the lock, and asking took seconds).
"""

from __future__ import annotations

import math

import torch

RESERVE_FRACTION = 1 / 8     # of the GPU's memory, the most one worker sets aside this way
TRANSIENT_OUTPUTS = 4        # outputs' worth beside a batch: a forward's intermediates, a comparison's


def judge_bytes(footprint: dict | None, batch: int, group_bytes: int) -> int:
    """What a judge's batch of timed calls holds at once (workers/judge._Judge): the inputs drawn for the
    group (up to `group_bytes` of them, at most `batch` calls), each call's reference output, and room
    for intermediates. `footprint`: the task's one input set and one output in bytes
    (tasks.footprint), None when unknown (then nothing). A batch paired with torch.compile draws twice
    per call: what it needs beyond this (where no fewer calls fit its group) is asked of CUDA as before."""
    if not footprint or not footprint.get("input_bytes"):
        return 0
    inputs = footprint["input_bytes"]
    output = footprint.get("output_bytes")
    output = inputs if output is None else output   # unknown: as large as the inputs
    calls = max(1, min(batch, math.ceil(group_bytes / inputs)))
    return calls * (inputs + output) + TRANSIENT_OUTPUTS * output


def reserve(device: torch.device, nbytes: int) -> int:
    """Have the caching allocator hold `nbytes` more (at most RESERVE_FRACTION of the GPU) as one free
    block; the bytes set aside (0 on the CPU, or when the GPU has not that much free)."""
    if device.type != "cuda" or nbytes <= 0:
        return 0
    nbytes = min(int(nbytes), int(torch.cuda.get_device_properties(device).total_memory * RESERVE_FRACTION))
    try:
        block = torch.empty(nbytes, dtype=torch.uint8, device=device)   # no kernel: memory only
    except torch.cuda.OutOfMemoryError:
        return 0
    del block   # back to the allocator's cache, not to CUDA
    return nbytes
