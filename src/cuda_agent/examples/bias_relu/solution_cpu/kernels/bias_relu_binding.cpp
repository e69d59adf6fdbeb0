// The PyTorch binding: compiled once (with a precompiled torch header) and cached.
#include <torch/extension.h>

extern "C" void bias_relu_launcher(const float* x, const float* bias, float* out, int64_t rows, int64_t cols);

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x must be contiguous float32");
    auto out = torch::empty_like(x);
    const int64_t cols = bias.numel();
    bias_relu_launcher(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.numel() / cols, cols);
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bias_relu", &bias_relu); }
