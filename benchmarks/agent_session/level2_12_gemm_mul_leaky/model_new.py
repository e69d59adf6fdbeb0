import torch
import torch.nn as nn

import cuda_extension  # built from kernels/ by ./compile (see SKILL.md)


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, multiplier, negative_slope):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)          # holds weight and bias
        self.multiplier = multiplier
        self.leaky_relu = nn.LeakyReLU(negative_slope)             # holds the slope

    def forward(self, x):
        return cuda_extension.gemm_mul_leaky(x, self.gemm.weight, self.gemm.bias, self.multiplier,
                                             self.leaky_relu.negative_slope)
