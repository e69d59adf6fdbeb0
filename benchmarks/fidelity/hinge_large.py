import torch
import torch.nn as nn


class Model(nn.Module):
    """Hinge loss over 64M values (~0.2 ms on an H100): a reduction whose output barely varies."""

    def forward(self, predictions, targets):
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


N, D = 8192, 8192


def get_inputs():
    return [torch.randn(N, D), torch.randint(0, 2, (N, D)).float() * 2 - 1]


def get_init_inputs():
    return []
