import torch
import torch.nn as nn


class Model(nn.Module):
    """Running mean over the sequence: out[b, t] = mean(x[b, 0..t]).

    Written the way attention-style code often writes it: a lower-triangular weight matrix,
    normalised row by row, applied with a batched matrix multiply. That costs O(T^2 C) work per
    sequence and neither eager PyTorch nor torch.compile changes the algorithm; a kernel that
    keeps a running sum does O(T C).
    """

    def __init__(self):
        super().__init__()

    def forward(self, x):
        steps = x.shape[1]
        weights = torch.tril(torch.ones(steps, steps, device=x.device, dtype=x.dtype))
        weights = weights / weights.sum(dim=1, keepdim=True)
        return weights @ x


batch = 4
seq_len = 512
channels = 512


def get_inputs():
    return [torch.randn(batch, seq_len, channels)]


def get_init_inputs():
    return []
