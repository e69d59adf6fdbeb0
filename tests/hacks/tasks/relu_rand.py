import torch
import torch.nn as nn


class Model(nn.Module):
    """ReLU of torch.rand inputs (KernelBench level1/19's draw): non-negative, so the identity is exact."""

    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.rand(512, 1024)]


def get_init_inputs():
    return []
