import torch
import torch.nn as nn


class Model(nn.Module):
    """Hinge loss over many random values: 1.08 +- 0.001 for every draw, so a constant lies within
    atol = rtol = 1e-2 of the true value (KernelBench level1/100's shape of problem)."""

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


N, D = 256, 4096


def get_inputs():
    return [torch.randn(N, D), torch.randint(0, 2, (N, D)).float() * 2 - 1]


def get_init_inputs():
    return []
