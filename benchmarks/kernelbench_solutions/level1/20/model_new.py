# level1/20: F.leaky_relu(x, negative_slope) in one pass (kernels/leaky_relu.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, negative_slope: float = 0.01):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.leaky_relu(x, float(self.negative_slope))
