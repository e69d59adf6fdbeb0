# level1/23: torch.softmax(x, dim=1), two passes over each row in one kernel (kernels/softmax.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.softmax(x)
