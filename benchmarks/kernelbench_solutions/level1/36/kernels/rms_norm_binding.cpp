#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int rms_norm_launcher(const float* x, float* y, int64_t batch, int channels, int64_t spatial, float eps,
                                 cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

torch::Tensor rms_norm(torch::Tensor x, double eps) {
    check(x, "x");
    TORCH_CHECK(x.dim() >= 2, "x must have a channel dimension (dim 1)");
    const int64_t spatial = x.numel() / std::max<int64_t>(1, x.size(0) * x.size(1));
    auto y = torch::empty_like(x);
    int status = rms_norm_launcher(x.data_ptr<float>(), y.data_ptr<float>(), x.size(0), (int)x.size(1), spatial,
                                   (float)eps, c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "rms_norm kernel failed: ", cudaGetErrorString((cudaError_t)status));
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("rms_norm", &rms_norm, "RMS norm over dim 1 (CUDA)"); }
