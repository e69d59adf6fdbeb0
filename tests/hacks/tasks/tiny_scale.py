import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU scaled by 1e-4: every output lies far below the published absolute tolerance of 1e-2."""

    def forward(self, x):
        return torch.relu(x) * 1e-4


def get_inputs():
    return [torch.randn(256, 4096)]


def get_init_inputs():
    return []
