import torch
import torch.nn as nn


class Model(nn.Module):
    """Every window of 128 consecutive samples of a signal, materialised (an unfold made contiguous)."""

    def forward(self, x):
        return x.unfold(0, 128, 1).contiguous()


def get_inputs():
    return [torch.randn(16384)]


def get_init_inputs():
    return []
