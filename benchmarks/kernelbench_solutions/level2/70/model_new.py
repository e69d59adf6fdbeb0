# level2/70: sigmoid(x W^T + bias) * a + (x W^T + bias): cuBLAS for the GEMM, one fused pass for the rest (kernels/linear_tail.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, input_size, hidden_size, scaling_factor):
        super().__init__()
        self.gemm = nn.Linear(input_size, hidden_size)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.linear_tail(x, self.gemm.weight, self.gemm.bias, float(self.scaling_factor), 0.0)
