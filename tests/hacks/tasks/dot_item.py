import torch
import torch.nn as nn


class Model(nn.Module):
    """The dot product of two tensors, returned as a Python number (`.item()`): about N(0, 724) over
    random inputs, so an answer from another draw is far outside the tolerance."""

    def forward(self, a, b):
        return torch.sum(a * b).item()


def get_inputs():
    return [torch.randn(512, 1024), torch.randn(512, 1024)]


def get_init_inputs():
    return []
