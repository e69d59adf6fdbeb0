#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int tanh_op_launcher(const float* in, float* out, int64_t n, cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

torch::Tensor tanh_op(torch::Tensor x) {
    check(x, "x");
    auto y = torch::empty_like(x);
    int status = tanh_op_launcher(x.data_ptr<float>(), y.data_ptr<float>(), x.numel(),
                                 c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "tanh_op kernel failed: ", cudaGetErrorString((cudaError_t)status));
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("tanh_op", &tanh_op, "Tanh (CUDA)"); }
