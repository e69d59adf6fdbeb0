// The PyTorch binding: compiled once (with a precompiled torch header) and cached.
#include <torch/extension.h>

extern "C" void running_mean_launcher(const float* x, float* out, int64_t batch, int64_t steps, int64_t channels);

torch::Tensor running_mean(torch::Tensor x) {
    TORCH_CHECK(x.dim() == 3 && x.is_contiguous() && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous float32 (batch, seq_len, channels) tensor");
    auto out = torch::empty_like(x);
    running_mean_launcher(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1), x.size(2));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("running_mean", &running_mean); }
