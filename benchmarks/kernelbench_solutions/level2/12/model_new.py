# level2/12: leaky_relu((x W^T + bias) * a, slope b): cuBLAS for the GEMM, one fused pass for the rest (kernels/linear_tail.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.multiplier = multiplier
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.linear_tail(x, self.gemm.weight, self.gemm.bias, float(self.multiplier), float(self.negative_slope))
