import torch
import torch.nn as nn


class Model(nn.Module):
    """The dot product of two small tensors, returned as a Python number (`.item()`): a call of microseconds,
    so that an answer computed element by element in Python stays within the suite's time."""

    def forward(self, a, b):
        return torch.sum(a * b).item()


def get_inputs():
    return [torch.randn(32, 64), torch.randn(32, 64)]


def get_init_inputs():
    return []
