# level1/36: x / sqrt(mean(x ** 2, dim=1) + eps), one kernel (kernels/rms_norm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self, num_features: int, eps: float = 1e-5):
        super().__init__()
        self.num_features = num_features
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return cuda_extension.rms_norm(x, float(self.eps))
