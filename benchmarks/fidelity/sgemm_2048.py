import torch
import torch.nn as nn


class Model(nn.Module):
    """A 2048 x 2048 x 2048 float32 matrix product (~0.3 ms through cuBLAS on an H100)."""

    def forward(self, A, B):
        return torch.matmul(A, B)


N = 2048


def get_inputs():
    return [torch.randn(N, N), torch.randn(N, N)]


def get_init_inputs():
    return []
