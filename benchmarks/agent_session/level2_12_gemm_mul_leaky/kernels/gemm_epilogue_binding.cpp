#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" int gemm_mul_leaky(const float* x, const float* W, const float* bias, float* y, int M, int N, int K,
                              float multiplier, float slope, int sms, cudaStream_t s);

torch::Tensor forward(torch::Tensor x, torch::Tensor W, torch::Tensor bias, double multiplier, double slope) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && W.is_contiguous() && bias.is_contiguous(), "contiguous CUDA inputs");
    TORCH_CHECK(x.scalar_type() == torch::kFloat32 && W.scalar_type() == torch::kFloat32, "float32 only");
    const int M = x.size(0), K = x.size(1), N = W.size(0);
    TORCH_CHECK(W.size(1) == K && bias.numel() == N && N % 4 == 0, "shape mismatch");
    int device = 0, sms = 132;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    auto y = torch::empty({M, N}, x.options());
    int status = gemm_mul_leaky(x.data_ptr<float>(), W.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(),
                                M, N, K, (float)multiplier, (float)slope, sms, c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "gemm_mul_leaky failed with status ", status);
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("gemm_mul_leaky", &forward); }
