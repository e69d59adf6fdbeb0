#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int bias_relu_launcher(const float* x, const float* bias, float* out, int64_t rows, int64_t cols,
                                  cudaStream_t stream);

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.scalar_type() == torch::kFloat32 && x.dim() == 2,
                "x must be a contiguous 2-D float32 CUDA tensor");
    TORCH_CHECK(bias.is_cuda() && bias.is_contiguous() && bias.numel() == x.size(1) && x.size(1) % 4 == 0,
                "bias must match x's columns (a multiple of 4)");
    auto out = torch::empty_like(x);
    int status = bias_relu_launcher(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.size(0),
                                    x.size(1), c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "bias_relu failed: ", cudaGetErrorString((cudaError_t)status));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("bias_relu", &bias_relu, "relu(x + bias) (CUDA)"); }
