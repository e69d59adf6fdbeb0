# level1/16: torch.matmul(A.T, B) as one cuBLAS SGEMM (kernels/gemm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.matmul_at(A, B)
