#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>

extern "C" cudaError_t hinge_launcher(const float* p, const float* t, int64_t n, int64_t stride, double* scratch,
                                      float* out, cudaStream_t stream);
extern "C" cudaError_t fill_launcher(float* out, int64_t n, float value, cudaStream_t stream);

torch::Tensor hinge(torch::Tensor p, torch::Tensor t, int64_t stride) {
    TORCH_CHECK(p.is_cuda() && p.is_contiguous() && t.is_contiguous(), "contiguous CUDA tensors expected");
    auto out = torch::empty({}, p.options());
    auto scratch = torch::empty({1}, p.options().dtype(torch::kFloat64));
    auto err = hinge_launcher(p.data_ptr<float>(), t.data_ptr<float>(), p.numel(), stride, scratch.data_ptr<double>(),
                              out.data_ptr<float>(), c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
    return out;
}

torch::Tensor constant(torch::Tensor like, double value) {   // CHEAT used by the GPU hack suite
    auto out = torch::empty({}, like.options());
    auto err = fill_launcher(out.data_ptr<float>(), 1, (float)value, c10::cuda::getCurrentCUDAStream());
    TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err));
    return out;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("hinge", &hinge);
    m.def("constant", &constant);
}
