# level1/38: x / torch.mean(torch.abs(x), dim=1, keepdim=True), one kernel (kernels/l1_norm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.l1_norm(x)
