#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int row_sum_launcher(const float* x, float* out, int rows, int cols, cudaStream_t s);

torch::Tensor row_sum(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.is_contiguous() && x.dim() == 2 && x.scalar_type() == torch::kFloat32,
                "x must be a contiguous 2-D float32 CUDA tensor");
    auto out = torch::empty({x.size(0)}, x.options());
    int err = row_sum_launcher(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1),
                               c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == 0, "row_sum launch failed: ", cudaGetErrorString((cudaError_t)err));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("row_sum", &row_sum); }
