import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU of a non-contiguous (transposed) input."""

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(1024, 512).t()]


def get_init_inputs():
    return []
