# level2/29: mish(mish(x W^T + bias)): cuBLAS for the GEMM, one fused pass for the rest (kernels/linear_tail.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.linear_tail(x, self.linear.weight, self.linear.bias, 0.0, 0.0)
