// The PyTorch binding: compiled once (with a precompiled torch header) and cached.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" cudaError_t bias_relu_launcher(const float* x, const float* bias, float* out, int64_t n,
                                          int64_t cols, cudaStream_t stream);

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32, "x: contiguous float32 CUDA");
    TORCH_CHECK(bias.numel() % 4 == 0, "features must be a multiple of 4");
    auto out = torch::empty_like(x);
    cudaError_t err = bias_relu_launcher(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(),
                                         x.numel(), bias.numel(), c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, "bias_relu launch failed: ", cudaGetErrorString(err));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bias_relu", &bias_relu); }
