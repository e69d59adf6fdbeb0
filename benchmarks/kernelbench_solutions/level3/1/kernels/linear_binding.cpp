#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

#include <string>

extern "C" int linear_launcher(const float* x, const float* W, const float* bias, float* y, int M, int N, int K,
                               bool relu, cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

// Launchers return 0, a CUDA error (positive) or a cuBLAS status (negative).
static void check_status(int status, const char* what) {
    TORCH_CHECK(status == 0, what, " failed: ", status > 0 ? cudaGetErrorString((cudaError_t)status) : "cuBLAS status ",
                status > 0 ? "" : std::to_string(-status));
}

torch::Tensor linear(torch::Tensor x, torch::Tensor W, torch::Tensor bias, bool relu) {
    check(x, "x");
    check(W, "W");
    check(bias, "bias");
    TORCH_CHECK(x.dim() == 2 && W.dim() == 2 && x.size(1) == W.size(1) && bias.numel() == W.size(0),
                "x [M, K], W [N, K] and bias [N] expected");
    auto y = torch::empty({x.size(0), W.size(0)}, x.options());
    check_status(linear_launcher(x.data_ptr<float>(), W.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                                 (int)x.size(0), (int)W.size(0), (int)x.size(1), relu,
                                 c10::cuda::getCurrentCUDAStream()), "linear");
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("linear", &linear, "x @ W^T + bias, optionally ReLU (cuBLAS + fused epilogue)");
}
