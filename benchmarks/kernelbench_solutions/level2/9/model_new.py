# level2/9: relu((x W^T + bias - a) * b): cuBLAS for the GEMM, one fused pass for the rest (kernels/linear_tail.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, subtract_value, multiply_value):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.linear_tail(x, self.linear.weight, self.linear.bias, float(self.subtract_value), float(self.multiply_value))
