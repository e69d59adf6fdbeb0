# level1/6: torch.matmul(A, B) with a large K as one cuBLAS SGEMM (kernels/gemm.cu).
import torch
import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return cuda_extension.matmul(A, B)
