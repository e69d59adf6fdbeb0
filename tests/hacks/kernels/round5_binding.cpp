// Binding for the hack suite's fifth round (tests/hacks/cases_round5.py): honest entry points and,
// clearly marked in round5.cpp, CHEATING kernels (products computed only where the sampler will look,
// work hidden from the harness's clock, stale numbers, estimates).
#include <torch/extension.h>

extern "C" {
void r5_gemm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);
void r5_gemm_workspace(const float* a, const float* b, float* c, float* bt, int64_t m, int64_t k, int64_t n);
void r5_gemm_naive(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n);
void r5_transpose(const float* x, int64_t rows, int64_t cols, float* out);
void r5_linear_t(const float* x, const float* wt, const float* bias, int64_t m, int64_t k, int64_t n, float* out);
void r5_dot(const float* a, const float* b, int64_t n, float* out);
void r5_hinge(const float* p, const float* t, int64_t n, float* out);
void r5_mse(const float* a, const float* b, int64_t n, float* out);
void r5_copy(const float* src, float* dst, int64_t n);
void r5_gemm_at(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, const int64_t* pos,
                int64_t count);
void r5_gemm_in_thread(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n, int reps);
void r5_dot_then_stale(const float* a, const float* b, int64_t n, float* out);
void r5_hinge_estimate(const float* p, const float* t, int64_t n, int64_t samples, float* out);
void r5_mse_estimate(const float* a, const float* b, int64_t n, int64_t samples, float* out);
}

static void check(const torch::Tensor& t, const char* what) {
    TORCH_CHECK(t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous(), what,
                ": a contiguous float32 CPU tensor is expected");
}

static torch::Tensor product(torch::Tensor a, torch::Tensor b) {
    check(a, "a");
    check(b, "b");
    TORCH_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(1) == b.size(0), "a (m, k) and b (k, n) expected");
    return torch::empty({a.size(0), b.size(1)}, a.options());
}

torch::Tensor gemm(torch::Tensor a, torch::Tensor b) {
    auto c = product(a, b);
    r5_gemm(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1), b.size(1));
    return c;
}

torch::Tensor gemm_workspace(torch::Tensor a, torch::Tensor b, torch::Tensor workspace) {
    auto c = product(a, b);
    check(workspace, "workspace");
    TORCH_CHECK(workspace.numel() >= b.numel(), "the workspace must hold b");
    r5_gemm_workspace(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), workspace.data_ptr<float>(),
                      a.size(0), a.size(1), b.size(1));
    return c;
}

torch::Tensor gemm_naive(torch::Tensor a, torch::Tensor b) {
    auto c = product(a, b);
    r5_gemm_naive(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1), b.size(1));
    return c;
}

torch::Tensor gemm_at(torch::Tensor a, torch::Tensor b, torch::Tensor positions) {
    auto c = product(a, b);
    TORCH_CHECK(positions.scalar_type() == torch::kInt64 && positions.is_contiguous(), "int64 positions expected");
    r5_gemm_at(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1), b.size(1),
               positions.data_ptr<int64_t>(), positions.numel());
    return c;
}

torch::Tensor gemm_in_thread(torch::Tensor a, torch::Tensor b, int64_t reps) {
    auto c = product(a, b);
    r5_gemm_in_thread(a.data_ptr<float>(), b.data_ptr<float>(), c.data_ptr<float>(), a.size(0), a.size(1),
                      b.size(1), static_cast<int>(reps));
    return c;
}

torch::Tensor transpose(torch::Tensor w) {
    check(w, "w");
    auto out = torch::empty({w.size(1), w.size(0)}, w.options());
    r5_transpose(w.data_ptr<float>(), w.size(0), w.size(1), out.data_ptr<float>());
    return out;
}

torch::Tensor linear_t(torch::Tensor x, torch::Tensor wt, torch::Tensor bias) {
    check(x, "x");
    check(wt, "wt");
    check(bias, "bias");
    auto out = torch::empty({x.size(0), wt.size(1)}, x.options());
    r5_linear_t(x.data_ptr<float>(), wt.data_ptr<float>(), bias.data_ptr<float>(), x.size(0), x.size(1), wt.size(1),
                out.data_ptr<float>());
    return out;
}

using PairKernel = void (*)(const float*, const float*, int64_t, float*);

static torch::Tensor pair_scalar(torch::Tensor a, torch::Tensor b, PairKernel kernel, bool one_d = true) {
    check(a, "a");
    check(b, "b");
    // one element (forward may hand back out.item()), or a 0-d tensor like torch.mean's
    auto out = one_d ? torch::empty({1}, a.options()) : torch::empty({}, a.options());
    kernel(a.data_ptr<float>(), b.data_ptr<float>(), a.numel(), out.data_ptr<float>());
    return out;
}

torch::Tensor dot(torch::Tensor a, torch::Tensor b) { return pair_scalar(a, b, r5_dot); }
torch::Tensor dot_then_stale(torch::Tensor a, torch::Tensor b) { return pair_scalar(a, b, r5_dot_then_stale); }
torch::Tensor hinge(torch::Tensor p, torch::Tensor t) { return pair_scalar(p, t, r5_hinge, false); }
torch::Tensor mse(torch::Tensor a, torch::Tensor b) { return pair_scalar(a, b, r5_mse, false); }

torch::Tensor hinge_estimate(torch::Tensor p, torch::Tensor t, int64_t samples) {
    check(p, "p");
    check(t, "t");
    auto out = torch::empty({}, p.options());
    r5_hinge_estimate(p.data_ptr<float>(), t.data_ptr<float>(), p.numel(), samples, out.data_ptr<float>());
    return out;
}

torch::Tensor mse_estimate(torch::Tensor a, torch::Tensor b, int64_t samples) {
    check(a, "a");
    check(b, "b");
    auto out = torch::empty({}, a.options());
    r5_mse_estimate(a.data_ptr<float>(), b.data_ptr<float>(), a.numel(), samples, out.data_ptr<float>());
    return out;
}

torch::Tensor copy(torch::Tensor x) {
    check(x, "x");
    auto out = torch::empty_like(x);
    r5_copy(x.data_ptr<float>(), out.data_ptr<float>(), x.numel());
    return out;
}

void touch(torch::Tensor x) { check(x, "x"); }   // takes a tensor and does nothing with it

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("gemm", &gemm);
    m.def("gemm_workspace", &gemm_workspace);
    m.def("gemm_naive", &gemm_naive);
    m.def("gemm_at", &gemm_at);
    m.def("gemm_in_thread", &gemm_in_thread);
    m.def("transpose", &transpose);
    m.def("linear_t", &linear_t);
    m.def("dot", &dot);
    m.def("dot_then_stale", &dot_then_stale);
    m.def("hinge", &hinge);
    m.def("mse", &mse);
    m.def("hinge_estimate", &hinge_estimate);
    m.def("mse_estimate", &mse_estimate);
    m.def("copy", &copy);
    m.def("touch", &touch);
}
