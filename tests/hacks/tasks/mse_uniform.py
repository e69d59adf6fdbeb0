import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean squared error of uniform inputs: 1/6 +- 3e-4 for every draw."""

    def forward(self, a, b):
        return torch.mean((a - b) ** 2)


def get_inputs():
    return [torch.rand(512, 2048), torch.rand(512, 2048)]


def get_init_inputs():
    return []
