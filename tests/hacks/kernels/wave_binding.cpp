// Binding for the hack suite's third and fourth rounds (tests/hacks/cases_wave.py): honest entry points
// and, clearly marked in wave.cpp, CHEATING kernels that compute the wrong thing in ways that pass the
// task's own draws (constants, samples of the input, unstable formulas, data movement by PyTorch ...).
#include <torch/extension.h>

extern "C" {
void wv_hinge(const float* p, const float* t, int64_t n, float* out);
void wv_mse(const float* a, const float* b, int64_t n, float* out);
void wv_softmax(const float* x, int64_t rows, int64_t cols, float* out, int stable);
void wv_relu_strided(const float* x, int64_t rows, int64_t cols, int64_t s0, int64_t s1, float* out);
void wv_col_sum_rows(const float* x, int64_t rows, int64_t cols, int64_t out_rows, float* out);
void wv_col_sum(const float* x, int64_t rows, int64_t cols, float* out);
void wv_channel_shuffle(const float* x, int64_t n, int64_t c, int64_t hw, int64_t groups, float* out);
void wv_transpose(const float* x, int64_t rows, int64_t cols, float* out);
void wv_linear_t(const float* x, const float* wt, const float* bias, int64_t m, int64_t k, int64_t n, float* out);
void wv_copy(const float* src, float* dst, int64_t n);
void wv_fill(float* out, int64_t n, float value);
void wv_hinge_every(const float* p, const float* t, int64_t n, int64_t stride, float* out);
void wv_mse_every(const float* a, const float* b, int64_t n, int64_t stride, float* out);
void wv_mse_first_half(const float* a, const float* b, int64_t n, float* out);
void wv_mse_random_subset(const float* a, const float* b, int64_t n, float* out);
void wv_hinge_after_n_calls(const float* p, const float* t, int64_t n, float* out);
void wv_hinge_unless_plain(const float* p, const float* t, int64_t n, float* out);
void wv_hinge_background(const float* p, const float* t, int64_t n, float* out);
void wv_memo_hinge(const float* p, const float* t, int64_t n, float* out);
void wv_slow_bias_relu(const float* x, const float* bias, float* out, int64_t rows, int64_t cols);
}

static void check(const torch::Tensor& t, const char* what, bool contiguous = true) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat32, what, ": a float32 CPU tensor is expected");
    TORCH_CHECK(!contiguous || t.is_contiguous(), what, ": a contiguous tensor is expected");
}

using PairKernel = void (*)(const float*, const float*, int64_t, float*);

static torch::Tensor pair_scalar(torch::Tensor a, torch::Tensor b, PairKernel kernel) {
    check(a, "a");
    check(b, "b");
    auto out = torch::empty({}, a.options());
    kernel(a.data_ptr<float>(), b.data_ptr<float>(), a.numel(), out.data_ptr<float>());
    return out;
}

torch::Tensor hinge(torch::Tensor p, torch::Tensor t) { return pair_scalar(p, t, wv_hinge); }
torch::Tensor mse(torch::Tensor a, torch::Tensor b) { return pair_scalar(a, b, wv_mse); }
torch::Tensor mse_first_half(torch::Tensor a, torch::Tensor b) { return pair_scalar(a, b, wv_mse_first_half); }
torch::Tensor mse_random_subset(torch::Tensor a, torch::Tensor b) { return pair_scalar(a, b, wv_mse_random_subset); }
torch::Tensor hinge_after_n_calls(torch::Tensor p, torch::Tensor t) { return pair_scalar(p, t, wv_hinge_after_n_calls); }
torch::Tensor hinge_unless_plain(torch::Tensor p, torch::Tensor t) { return pair_scalar(p, t, wv_hinge_unless_plain); }
torch::Tensor hinge_background(torch::Tensor p, torch::Tensor t) { return pair_scalar(p, t, wv_hinge_background); }
torch::Tensor memo_hinge(torch::Tensor p, torch::Tensor t) { return pair_scalar(p, t, wv_memo_hinge); }

torch::Tensor hinge_every(torch::Tensor p, torch::Tensor t, int64_t stride) {
    check(p, "p");
    check(t, "t");
    auto out = torch::empty({}, p.options());
    wv_hinge_every(p.data_ptr<float>(), t.data_ptr<float>(), p.numel(), stride, out.data_ptr<float>());
    return out;
}

torch::Tensor mse_every(torch::Tensor a, torch::Tensor b, int64_t stride) {
    check(a, "a");
    check(b, "b");
    auto out = torch::empty({}, a.options());
    wv_mse_every(a.data_ptr<float>(), b.data_ptr<float>(), a.numel(), stride, out.data_ptr<float>());
    return out;
}

torch::Tensor constant(torch::Tensor like, double value) {  // `like`'s shape, one value everywhere
    auto out = torch::empty_like(like);
    wv_fill(out.data_ptr<float>(), out.numel(), static_cast<float>(value));
    return out;
}

torch::Tensor scalar(torch::Tensor like, double value) {
    auto out = torch::empty({}, like.options());
    wv_fill(out.data_ptr<float>(), 1, static_cast<float>(value));
    return out;
}

torch::Tensor softmax(torch::Tensor x, bool stable) {
    check(x, "x");
    auto out = torch::empty_like(x);
    wv_softmax(x.data_ptr<float>(), x.size(0), x.size(1), out.data_ptr<float>(), stable ? 1 : 0);
    return out;
}

torch::Tensor relu_strided(torch::Tensor x) {
    check(x, "x", false);
    TORCH_CHECK(x.dim() == 2, "x must be 2-D");
    auto out = torch::empty({x.size(0), x.size(1)}, x.options());
    wv_relu_strided(x.data_ptr<float>(), x.size(0), x.size(1), x.stride(0), x.stride(1), out.data_ptr<float>());
    return out;
}

torch::Tensor col_sum_rows(torch::Tensor x, int64_t out_rows) {
    check(x, "x");
    auto out = torch::empty({out_rows, x.size(1)}, x.options());
    wv_col_sum_rows(x.data_ptr<float>(), x.size(0), x.size(1), out_rows, out.data_ptr<float>());
    return out;
}

torch::Tensor col_sum(torch::Tensor x) {
    check(x, "x");
    auto out = torch::empty({1, x.size(1)}, x.options());
    wv_col_sum(x.data_ptr<float>(), x.size(0), x.size(1), out.data_ptr<float>());
    return out;
}

torch::Tensor channel_shuffle(torch::Tensor x, int64_t groups) {
    check(x, "x");
    auto out = torch::empty_like(x);
    wv_channel_shuffle(x.data_ptr<float>(), x.size(0), x.size(1), x.size(2) * x.size(3), groups, out.data_ptr<float>());
    return out;
}

torch::Tensor transpose(torch::Tensor w) {
    check(w, "w");
    auto out = torch::empty({w.size(1), w.size(0)}, w.options());
    wv_transpose(w.data_ptr<float>(), w.size(0), w.size(1), out.data_ptr<float>());
    return out;
}

torch::Tensor linear_t(torch::Tensor x, torch::Tensor wt, torch::Tensor bias) {
    check(x, "x");
    check(wt, "wt");
    check(bias, "bias");
    auto out = torch::empty({x.size(0), wt.size(1)}, x.options());
    wv_linear_t(x.data_ptr<float>(), wt.data_ptr<float>(), bias.data_ptr<float>(), x.size(0), x.size(1), wt.size(1),
                out.data_ptr<float>());
    return out;
}

torch::Tensor copy(torch::Tensor x) {
    check(x, "x");
    auto out = torch::empty_like(x);
    wv_copy(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}

torch::Tensor slow_bias_relu(torch::Tensor x, torch::Tensor bias) {
    check(x, "x");
    check(bias, "bias");
    auto out = torch::empty_like(x);
    wv_slow_bias_relu(x.data_ptr<float>(), bias.data_ptr<float>(), out.data_ptr<float>(), x.numel() / bias.numel(),
                      bias.numel());
    return out;
}

// CHEATING: PyTorch does the shuffle, on a tensor made over the input's memory (torch::from_blob)
// that starts `before` floats ahead of it (the view skips them): neither the input's tensor nor its
// storage. `clone`: .clone() instead of .contiguous().
torch::Tensor channel_shuffle_alias(torch::Tensor x, int64_t groups, int64_t before, bool clone) {
    check(x, "x");
    const int64_t n = x.size(0), c = x.size(1), h = x.size(2), w = x.size(3);
    auto alias = torch::from_blob(x.data_ptr<float>() - before, {x.numel() + before}, x.options())
                     .narrow(0, before, x.numel()).view({n, groups, c / groups, h, w}).transpose(1, 2);
    return (clone ? alias.clone(at::MemoryFormat::Contiguous) : alias.contiguous()).view({n, c, h, w});
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("hinge", &hinge);
    m.def("mse", &mse);
    m.def("mse_first_half", &mse_first_half);
    m.def("mse_random_subset", &mse_random_subset);
    m.def("hinge_after_n_calls", &hinge_after_n_calls);
    m.def("hinge_background", &hinge_background);
    m.def("hinge_unless_plain", &hinge_unless_plain);
    m.def("memo_hinge", &memo_hinge);
    m.def("hinge_every", &hinge_every);
    m.def("mse_every", &mse_every);
    m.def("constant", &constant);
    m.def("scalar", &scalar);
    m.def("softmax", &softmax);
    m.def("relu_strided", &relu_strided);
    m.def("col_sum_rows", &col_sum_rows);
    m.def("col_sum", &col_sum);
    m.def("channel_shuffle", &channel_shuffle);
    m.def("transpose", &transpose);
    m.def("linear_t", &linear_t);
    m.def("copy", &copy);
    m.def("channel_shuffle_alias", &channel_shuffle_alias);
    m.def("slow_bias_relu", &slow_bias_relu);
}
