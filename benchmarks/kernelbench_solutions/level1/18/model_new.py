# level1/18: torch.matmul(A.T, B.T) as one cuBLAS SGEMM (kernels/gemm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.matmul_at_bt(A, B)
