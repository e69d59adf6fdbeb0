# level1/10: torch.matmul(A, B) of a 3-D A by a matrix as one cuBLAS SGEMM (kernels/gemm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.matmul3d(A, B)
