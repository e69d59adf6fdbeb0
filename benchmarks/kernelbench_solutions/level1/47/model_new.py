# level1/47: torch.sum(x, dim=self.dim, keepdim=True), one kernel (kernels/sum_dim.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.sum_dim(x, int(self.dim))
