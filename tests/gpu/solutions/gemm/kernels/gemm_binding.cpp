#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int matmul_launcher(const float* A, const float* B, float* C, int M, int N, int K, cudaStream_t s);
extern "C" int linear_launcher(const float* x, const float* W, const float* bias, float* y, int M, int N, int K,
                               bool relu, cudaStream_t s);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

torch::Tensor matmul(torch::Tensor A, torch::Tensor B) {
    check(A, "A"); check(B, "B");
    TORCH_CHECK(A.size(1) == B.size(0), "inner dimensions differ");
    auto C = torch::empty({A.size(0), B.size(1)}, A.options());
    int status = matmul_launcher(A.data_ptr<float>(), B.data_ptr<float>(), C.data_ptr<float>(), A.size(0),
                                 B.size(1), A.size(1), c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "cuBLAS failed with status ", status);
    return C;
}

torch::Tensor linear(torch::Tensor x, torch::Tensor W, c10::optional<torch::Tensor> bias, bool relu) {
    check(x, "x"); check(W, "W");
    TORCH_CHECK(x.size(1) == W.size(1), "x and W disagree on in_features");
    auto y = torch::empty({x.size(0), W.size(0)}, x.options());
    const float* b = nullptr;
    if (bias.has_value()) { check(*bias, "bias"); b = bias->data_ptr<float>(); }
    int status = linear_launcher(x.data_ptr<float>(), W.data_ptr<float>(), b, y.data_ptr<float>(), x.size(0),
                                 W.size(0), x.size(1), relu, c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "linear failed with status ", status);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("matmul", &matmul);
    m.def("linear", &linear, py::arg("x"), py::arg("W"), py::arg("bias") = py::none(), py::arg("relu") = false);
}
