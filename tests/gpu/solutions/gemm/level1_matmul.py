import torch.nn as nn

import cuda_extension


class ModelNew(nn.Module):
    def forward(self, A, B):
        return cuda_extension.matmul(A, B)
