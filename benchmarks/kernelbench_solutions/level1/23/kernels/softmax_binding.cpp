#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int softmax_launcher(const float* x, float* y, int64_t rows, int64_t cols, cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

// Softmax over dim 1 of a 2-D tensor (the task's shape).
torch::Tensor softmax(torch::Tensor x) {
    check(x, "x");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D");
    auto y = torch::empty_like(x);
    int status = softmax_launcher(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), x.size(1),
                                 c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "softmax kernel failed: ", cudaGetErrorString((cudaError_t)status));
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("softmax", &softmax, "Softmax (CUDA)"); }
