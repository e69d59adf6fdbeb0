# level1/21: torch.sigmoid(x) in one pass (kernels/sigmoid.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.sigmoid(x)
