"""Device memory a judge asks for in its set-up, not inside its first batch of timed calls.

The caching allocator asks CUDA for memory (cudaMalloc) the first time it has no free block of a size,
and cudaMalloc waits for the device: inside a held timed call it would wait for the hold itself
(hold.py). So the judge asks for what a batch holds at once (the memory model's `EvalMemory.reserve`)
in one block, in its set-up's shared hold of the lock; the allocator keeps the block when it is let
go and splits it for the tensors that follow. Never without the lock: memory asked for while another
evaluation's call is timed slows that call (figures in docs/benchmarks.md).
"""

from __future__ import annotations

import torch

from cuda_agent.env.infra.memory import from_job

RESERVE_FRACTION = 1 / 8     # of the GPU's memory, the most one worker sets aside this way
# A CPU judge's heap grown up front (`reserve_heap`): its batch's bytes times HEAP_FACTOR (the extent
# its heap reaches once draws, references and the messages between them are interleaved: 1x and 2x
# still left page faults inside timed runs of the embedded example, 4x none), at most HEAP_MOST, in
# pieces under the workers' mmap threshold (isolation.STEADY_HEAP) so that the heap serves them.
HEAP_FACTOR = 4
HEAP_MOST = 1 << 30
HEAP_PIECE = 16 << 20


def judge_bytes(footprint: dict | None, batch: int, group_bytes: int) -> int:
    """What a judge's batch of timed calls holds at once (`memory.EvalMemory.reserve`), from the
    footprint its job carries (None or no inputs: nothing)."""
    memory = from_job(footprint)
    return 0 if memory is None else memory.reserve(batch, group_bytes)


def call_bytes(footprint: dict | None) -> int:
    """One call's inputs and output, from the footprint a judge's job carries (0 when unknown)."""
    memory = from_job(footprint)
    return 0 if memory is None else memory.input_bytes + memory.output_bytes


def reserve(device: torch.device, nbytes: int, call_bytes: int = 0) -> int:
    """Have the caching allocator hold `nbytes` more (at most RESERVE_FRACTION of the GPU) as one free
    block; the bytes set aside (0 on the CPU, or when the GPU has not that much free). Nothing where one
    call's inputs and output (`call_bytes`) exceed that most: such a block holds no call, and its
    remainder after the first tensors is a fragment no later one fits."""
    if device.type != "cuda" or nbytes <= 0:
        return 0
    most = int(torch.cuda.get_device_properties(device).total_memory * RESERVE_FRACTION)
    if call_bytes > most:
        return 0
    nbytes = min(int(nbytes), most)
    try:
        block = torch.empty(nbytes, dtype=torch.uint8, device=device)   # no kernel: memory only
    except torch.cuda.OutOfMemoryError:
        return 0
    del block   # back to the allocator's cache, not to CUDA
    return nbytes


def reserve_heap(nbytes: int) -> int:
    """On the CPU: the heap grown by HEAP_FACTOR x `nbytes` (at most HEAP_MOST) in written pieces (their
    pages mapped now, outside any timed run), then freed; under the CPU workers' heap settings
    (isolation.STEADY_HEAP: no trim) the pages stay, so the tensors of later timed runs land in mapped
    memory instead of faulting fresh pages in, a fault per 4 KiB, inside the run. The bytes grown by."""
    nbytes = min(HEAP_FACTOR * max(int(nbytes), 0), HEAP_MOST)
    pieces = [torch.ones(min(HEAP_PIECE, nbytes - start), dtype=torch.uint8) for start in range(0, nbytes, HEAP_PIECE)]
    del pieces
    return nbytes
