import torch
import torch.nn as nn

import cuda_extension  # built from kernels/ by ./compile (see SKILL.md)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)  # holds weight and bias only

    def forward(self, x: torch.Tensor):
        return cuda_extension.layer_norm(x, self.ln.weight, self.ln.bias, self.ln.eps)
