# level1/32: F.hardtanh(x, -1, 1) in one pass (kernels/hardtanh.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.hardtanh(x)
