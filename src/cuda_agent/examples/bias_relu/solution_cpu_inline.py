# Single-file form (KernelBench's): a C++ kernel for the CPU backend, built with load_inline.
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

source = r"""
#include <torch/extension.h>

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && x.dtype() == torch::kFloat32, "x must be contiguous float32");
    auto out = torch::empty_like(x);
    const float* xp = x.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const int64_t cols = bias.numel(), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = xp[r * cols + c] + bp[c];
            op[r * cols + c] = v > 0.f ? v : 0.f;
        }
    return out;
}
"""

ext = load_inline(name="bias_relu_cpu", cpp_sources=source, functions=["bias_relu"])


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        return ext.bias_relu(x, self.bias)
