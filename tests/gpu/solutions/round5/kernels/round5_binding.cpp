// Binding of the GPU hack suite's fifth round (tests/gpu/hacks/test_gpu_round5.py). Every entry launches
// on the current stream except bias_relu_legacy, which a cheat there uses to put its work on the legacy
// default stream behind the harness's back.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

extern "C" {
cudaError_t r5_bias_relu(const float* x, const float* bias, float* out, int64_t begin, int64_t end, int64_t cols,
                         cudaStream_t stream);
int r5_dot_blocks();
cudaError_t r5_dot(const float* a, const float* b, int64_t n, double* scratch, float* out, cudaStream_t stream);
cudaError_t r5_copy(const float* src, float* dst, int64_t n, cudaStream_t stream);
cudaError_t r5_linear(const float* x, const float* w, const float* bias, float* y, int m, int n, int k,
                      cudaStream_t stream);
}

static void check(const torch::Tensor& t, const char* what) {
    TORCH_CHECK(t.is_cuda() && t.is_contiguous() && t.scalar_type() == torch::kFloat32, what,
                ": a contiguous float32 CUDA tensor is expected");
}

static void ok(cudaError_t err) { TORCH_CHECK(err == cudaSuccess, cudaGetErrorString(err)); }

static cudaStream_t current() { return c10::cuda::getCurrentCUDAStream(); }

static void bias_relu_span(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& out, int64_t begin,
                           int64_t end, cudaStream_t stream) {
    check(x, "x");
    check(bias, "bias");
    check(out, "out");
    ok(r5_bias_relu(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), begin, end, bias.numel(),
                    stream));
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    bias_relu_span(x, bias, out, 0, x.numel(), current());
    return out;
}

torch::Tensor bias_relu_legacy(torch::Tensor x, torch::Tensor bias) {   // on the legacy default stream
    auto out = torch::empty_like(x);
    bias_relu_span(x, bias, out, 0, x.numel(), cudaStreamLegacy);
    return out;
}

void bias_relu_into(torch::Tensor x, torch::Tensor bias, torch::Tensor out) {
    bias_relu_span(x, bias, out, 0, x.numel(), current());
}

void bias_relu_rows(torch::Tensor x, torch::Tensor bias, torch::Tensor out, int64_t row0, int64_t rows) {
    const int64_t cols = bias.numel();
    bias_relu_span(x, bias, out, row0 * cols, std::min<int64_t>((row0 + rows) * cols, x.numel()), current());
}

torch::Tensor dot_ws(torch::Tensor a, torch::Tensor b, torch::Tensor scratch) {
    check(a, "a");
    check(b, "b");
    TORCH_CHECK(scratch.is_cuda() && scratch.scalar_type() == torch::kFloat64 && scratch.numel() >= r5_dot_blocks(),
                "scratch: ", r5_dot_blocks(), " float64 CUDA values expected");
    auto out = torch::empty({1}, a.options());
    ok(r5_dot(a.data_ptr<float>(), b.data_ptr<float>(), a.numel(), scratch.data_ptr<double>(), out.data_ptr<float>(),
              current()));
    return out;
}

torch::Tensor dot(torch::Tensor a, torch::Tensor b) {
    return dot_ws(a, b, torch::empty({r5_dot_blocks()}, a.options().dtype(torch::kFloat64)));
}

torch::Tensor copy(torch::Tensor x) {
    check(x, "x");
    auto out = torch::empty_like(x);
    ok(r5_copy(x.data_ptr<float>(), out.data_ptr<float>(), x.numel(), current()));
    return out;
}

void copy_into(torch::Tensor dst, torch::Tensor src) {
    check(dst, "dst");
    check(src, "src");
    TORCH_CHECK(dst.numel() == src.numel(), "dst and src differ in size");
    ok(r5_copy(src.data_ptr<float>(), dst.data_ptr<float>(), src.numel(), current()));
}

torch::Tensor linear(torch::Tensor x, torch::Tensor w, torch::Tensor bias) {
    check(x, "x");
    check(w, "w");
    check(bias, "bias");
    auto y = torch::empty({x.size(0), w.size(0)}, x.options());
    ok(r5_linear(x.data_ptr<float>(), w.data_ptr<float>(), bias.data_ptr<float>(), y.data_ptr<float>(), x.size(0),
                 w.size(0), x.size(1), current()));
    return y;
}

void touch(torch::Tensor x) { TORCH_CHECK(x.is_cuda(), "x: a CUDA tensor is expected"); }

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("bias_relu", &bias_relu);
    m.def("bias_relu_legacy", &bias_relu_legacy);
    m.def("bias_relu_into", &bias_relu_into);
    m.def("bias_relu_rows", &bias_relu_rows);
    m.def("dot", &dot);
    m.def("dot_ws", &dot_ws);
    m.def("copy", &copy);
    m.def("copy_into", &copy_into);
    m.def("linear", &linear);
    m.def("touch", &touch);
}
