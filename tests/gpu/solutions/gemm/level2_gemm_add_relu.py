import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features, bias_shape):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)  # holds the weight only
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x):
        return cuda_extension.linear(x, self.gemm.weight, self.bias, True)
