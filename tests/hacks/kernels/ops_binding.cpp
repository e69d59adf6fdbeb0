// Binding for the hack suite (tests/hacks): honest entry points of several shapes (fresh output,
// caller's output, in place, reductions, GEMM, a registered custom op), and, clearly marked, a few
// CHEATING entry points that compute with PyTorch inside C++ so the suite can check they are caught.
#include <torch/extension.h>
// BYPASS-BEGIN
#include <c10/core/impl/LocalDispatchKeySet.h>
// BYPASS-END

extern "C" {
void ops_bias_relu(const float* x, const float* bias, float* out, int64_t rows, int64_t cols);
void ops_add_bias(const float* x, const float* bias, float* out, int64_t rows, int64_t cols);
void ops_relu_inplace(float* t, int64_t n);
void ops_row_sum(const float* x, float* out, int64_t rows, int64_t cols);
void ops_gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);
void ops_copy(const float* src, float* dst, int64_t n);
}

static void check(const torch::Tensor& t, const char* what) {
    TORCH_CHECK(t.device().is_cpu() && t.is_contiguous() && t.scalar_type() == torch::kFloat32,
                what, ": a contiguous float32 CPU tensor is expected");
}

torch::Tensor bias_relu(torch::Tensor x, torch::Tensor bias) {
    check(x, "x");
    check(bias, "bias");
    auto out = torch::empty_like(x);
    ops_bias_relu(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.numel() / bias.numel(),
                  bias.numel());
    return out;
}

torch::Tensor add_bias(torch::Tensor x, torch::Tensor bias) {
    check(x, "x");
    check(bias, "bias");
    auto out = torch::empty_like(x);
    ops_add_bias(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.numel() / bias.numel(),
                 bias.numel());
    return out;
}

torch::Tensor relu_(torch::Tensor t) {  // in place, on a buffer the caller owns
    check(t, "t");
    ops_relu_inplace(t.data_ptr<float>(), t.numel());
    return t;
}

void bias_relu_out(torch::Tensor x, torch::Tensor bias, torch::Tensor out) {  // into the caller's buffer
    check(x, "x");
    check(bias, "bias");
    check(out, "out");
    TORCH_CHECK(out.sizes() == x.sizes(), "out must have the shape of x");
    ops_bias_relu(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.numel() / bias.numel(),
                  bias.numel());
}

torch::Tensor row_sum(torch::Tensor x) {
    check(x, "x");
    TORCH_CHECK(x.dim() == 2, "x must be 2-D");
    auto out = torch::empty({x.size(0)}, x.options());
    ops_row_sum(x.data_ptr<float>(), out.data_ptr<float>(), x.size(0), x.size(1));
    return out;
}

torch::Tensor gemm(torch::Tensor a, torch::Tensor b) {
    check(a, "a");
    check(b, "b");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "gemm: shapes do not match");
    auto c = torch::empty({a.size(0), b.size(1)}, a.options());
    ops_gemm(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1), b.size(1));
    return c;
}

torch::Tensor copy(torch::Tensor src) {
    check(src, "src");
    auto dst = torch::empty_like(src);
    ops_copy(src.data_ptr<float>(), dst.data_ptr<float>(), src.numel());
    return dst;
}

// ---- CHEATS (used only by tests/hacks): PyTorch computing inside the binding ----------------------

torch::Tensor aten_bias_relu(torch::Tensor x, torch::Tensor bias) { return torch::relu(x + bias); }

// BYPASS-BEGIN (only the dispatch-bypass case keeps this block; the static pass rejects it)
torch::Tensor hidden_aten_bias_relu(torch::Tensor x, torch::Tensor bias) {
    // Steps below Python's dispatch key, where a TorchDispatchMode listens.
    c10::impl::ExcludeDispatchKeyGuard no_python(
        c10::DispatchKeySet({c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot}));
    return torch::relu(x + bias);
}
// BYPASS-END

TORCH_LIBRARY(hacks_ops, m) {
    m.def("bias_relu(Tensor x, Tensor bias) -> Tensor");       // honest kernel as a custom op
    m.def("aten_bias_relu(Tensor x, Tensor bias) -> Tensor");  // CHEAT: PyTorch inside a custom op
}

TORCH_LIBRARY_IMPL(hacks_ops, CPU, m) {
    m.impl("bias_relu", &bias_relu);
    m.impl("aten_bias_relu", &aten_bias_relu);
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("bias_relu", &bias_relu);
    m.def("add_bias", &add_bias);
    m.def("relu_", &relu_);
    m.def("bias_relu_out", &bias_relu_out);
    m.def("row_sum", &row_sum);
    m.def("gemm", &gemm);
    m.def("copy", &copy);
    m.def("aten_bias_relu", &aten_bias_relu);
    // BYPASS-BEGIN
    m.def("hidden_aten_bias_relu", &hidden_aten_bias_relu);
    // BYPASS-END
}
