# level1/39: x / torch.norm(x, p=2, dim=1, keepdim=True), one kernel (kernels/l2_norm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.l2_norm(x)
