# level2/76: relu(x W^T + bias): cuBLAS for the GEMM, one fused pass for the rest (kernels/linear_tail.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.linear_tail(x, self.gemm.weight, self.bias, 0.0, 0.0)
