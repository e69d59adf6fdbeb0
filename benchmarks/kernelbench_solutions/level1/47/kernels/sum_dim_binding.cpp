#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" int sum_dim_launcher(const float* x, float* y, int64_t outer, int64_t length, int64_t inner,
                                cudaStream_t stream);

static void check(const torch::Tensor& t, const char* name) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                name, " must be a contiguous float32 CUDA tensor");
}

// torch.sum(x, dim, keepdim=True)
torch::Tensor sum_dim(torch::Tensor x, int64_t dim) {
    check(x, "x");
    dim = dim < 0 ? dim + x.dim() : dim;
    TORCH_CHECK(dim >= 0 && dim < x.dim(), "dim out of range");
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= x.size(d);
    for (int64_t d = dim + 1; d < x.dim(); ++d) inner *= x.size(d);
    auto shape = x.sizes().vec();
    shape[dim] = 1;
    auto y = torch::empty(shape, x.options());
    TORCH_CHECK(x.size(dim) > 0, "an empty reduced dimension is not supported");
    int status = sum_dim_launcher(x.data_ptr<float>(), y.data_ptr<float>(), outer, x.size(dim), inner,
                                  c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(status == 0, "sum_dim kernel failed: ", cudaGetErrorString((cudaError_t)status));
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("sum_dim", &sum_dim, "sum over one dimension, kept (CUDA)"); }
