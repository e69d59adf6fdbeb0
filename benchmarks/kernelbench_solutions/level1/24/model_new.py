# level1/24: torch.log_softmax(x, dim=1), two passes over each row in one kernel (kernels/log_softmax.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, dim: int = 1):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.log_softmax(x)
