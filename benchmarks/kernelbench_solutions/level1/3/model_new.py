# level1/3: torch.bmm(A, B) as one cuBLAS SgemmStridedBatched (kernels/gemm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.bmm(A, B)
