"""The input sentinel's comparison: bit for bit, in chunks (a 6 GiB input gets no temporaries of its size)."""

from __future__ import annotations

import torch

from cuda_agent.env.rules import guard


def test_inputs_compare_bit_for_bit_chunk_by_chunk(monkeypatch):
    monkeypatch.setattr(guard, "_CHUNK", 7)   # several chunks, the last one short
    a = torch.randn(5, 9)
    assert guard._same(a, a.clone())
    changed = a.clone()
    changed[4, 8] += 1.0                      # in the last chunk
    assert not guard._same(a, changed)
    a[0, 0] = float("nan")                    # a NaN left in place is unchanged
    assert guard._same(a, a.clone())
    negative_zero = torch.zeros(3)
    assert not guard._same(negative_zero, -negative_zero)   # a write of -0.0 over 0.0 is a write
    flags = torch.tensor([True, False])
    assert guard._same(flags, flags.clone()) and not guard._same(flags, torch.tensor([True, True]))
    half = torch.randn(3, 4).half()
    assert guard._same(half, half.clone())
    transposed = torch.randn(4, 6).t()        # not contiguous: compared by value
    assert guard._same(transposed, transposed.clone()) and not guard._same(transposed, transposed + 1)
