import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over 65536 columns: every value is near 1 / 65536 = 1.5e-5."""

    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(8, 65536)]


def get_init_inputs():
    return []
