# Single-file form (KernelBench's): the CUDA kernel and its wrapper built with load_inline.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

__global__ void bias_relu_kernel(const float* x, const float* bias, float* out, long n, long cols) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = fmaxf(x[i] + bias[i % cols], 0.f);
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    long n = x.numel();
    bias_relu_kernel<<<(n + 255) / 256, 256, 0, c10::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), n, bias.numel());
    return out;
}
"""

ext = load_inline(name="bias_relu_cuda", cpp_sources="torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias);",
                  cuda_sources=cuda_source, functions=["bias_relu"])


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return ext.bias_relu(x, self.bias)
