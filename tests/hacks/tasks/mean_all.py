import torch
import torch.nn as nn


class Model(nn.Module):
    """A degenerate task: the mean of 512K standard normal values is 0 within 1e-2 for every draw,
    so a constant output passes verification. The data filter must drop such tasks."""

    def forward(self, x):
        return torch.mean(x)


def get_inputs():
    return [torch.randn(512, 1024)]


def get_init_inputs():
    return []
