"""The judge's memory asked for in its set-up (env/infra/reserve.py), on a real GPU: after the reserve, a first
batch of calls finds its memory in the allocator's cache (no cudaMalloc, which waits for the device:
inside a held call, for the hold). Run with `-m gpu`."""

from __future__ import annotations

import pytest
import torch

from cuda_agent.env.infra.reserve import RESERVE_FRACTION, call_bytes, judge_bytes, reserve
from cuda_agent.env.workers.judge import GROUP_BYTES

pytestmark = pytest.mark.gpu
DEVICE = torch.device("cuda", 0)
ROWS, COLS = 4096, 2048   # 32 MiB of floats per tensor


def cuda_mallocs() -> int:
    """Segments the allocator has asked CUDA for so far (large blocks)."""
    return torch.cuda.memory_stats(DEVICE)["segment.large_pool.allocated"]


def cold_allocator() -> None:
    torch.cuda.synchronize(DEVICE)
    torch.cuda.empty_cache()


def judges_first_batch() -> tuple[list, list]:
    """What a judge's first batch of timed calls allocates: eight draws, then eight outputs kept."""
    inputs = [(torch.randn(ROWS, COLS, device=DEVICE), torch.randn(COLS, device=DEVICE)) for _ in range(8)]
    return inputs, [torch.relu(x + bias) for x, bias in inputs]


def test_a_judges_first_batch_finds_its_memory_reserved():
    footprint = {"input_bytes": (ROWS + 1) * COLS * 4, "output_bytes": ROWS * COLS * 4}
    cold_allocator()
    before = cuda_mallocs()
    kept = judges_first_batch()
    assert cuda_mallocs() > before          # on a cold allocator the batch asks CUDA for memory
    del kept
    cold_allocator()
    assert reserve(DEVICE, judge_bytes(footprint, batch=8, group_bytes=GROUP_BYTES)) > 0
    before = cuda_mallocs()
    kept = judges_first_batch()
    assert cuda_mallocs() == before         # after the reserve it asks for nothing
    del kept


def test_no_block_is_set_aside_where_one_call_exceeds_it():
    """A task whose call is larger than the most the reserve takes (on an 80 GB GPU, KernelBench level1/19's
    6 GiB input and output): a block of that most holds none of its calls, and what is left of it after the
    first tensor is a fragment no later one fits."""
    cold_allocator()
    most = int(torch.cuda.get_device_properties(DEVICE).total_memory * RESERVE_FRACTION)
    half = max(6 << 30, most // 2 + (1 << 30))   # input and output together past the most, on any GPU
    footprint = {"input_bytes": half, "output_bytes": half}
    held = torch.cuda.memory_reserved(DEVICE)
    assert reserve(DEVICE, judge_bytes(footprint, batch=8, group_bytes=GROUP_BYTES), call_bytes(footprint)) == 0
    assert torch.cuda.memory_reserved(DEVICE) == held
