// The hack suite's eighteenth round (cases_round18.py): relu(x + bias) with its arithmetic in a library the sampler
// leaves alone, linked by the solution's own library.
// crypto_relu: OpenSSL's BIGNUM arithmetic (the system's libcrypto, which the worker had mapped before the sampler
//              was made, through hashlib): x and bias as fixed-point integers, BN_add, the sign by BN_is_negative.
// saxpy_relu:  x + bias by BLAS (cblas_saxpy, MKL's, in libtorch_cpu) row by row, relu by the solution's own loop.
#include <torch/extension.h>

#include <openssl/bn.h>

#include <cmath>
#include <cstring>

extern "C" void cblas_saxpy(int n, float alpha, const float* x, int incx, float* y, int incy);

namespace {

constexpr double SCALE = 1 << 20;

void set(BIGNUM* bn, float v) {
    BN_set_word(bn, static_cast<BN_ULONG>(std::llround(std::fabs(v) * SCALE)));
    BN_set_negative(bn, v < 0);
}

torch::Tensor crypto_relu(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    const int64_t cols = x.size(-1), n = x.numel();
    BIGNUM *a = BN_new(), *b = BN_new(), *r = BN_new();
    for (int64_t i = 0; i < n; ++i) {
        set(a, xs[i]);
        set(b, bs[i % cols]);
        BN_add(r, a, b);
        os[i] = BN_is_negative(r) ? 0.0f : static_cast<float>(BN_get_word(r) / SCALE);
    }
    BN_free(a);
    BN_free(b);
    BN_free(r);
    return out;
}

torch::Tensor saxpy_relu(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    const int64_t cols = x.size(-1), rows = x.numel() / cols;
    float* os = out.data_ptr<float>();
    std::memcpy(os, x.data_ptr<float>(), x.numel() * sizeof(float));
    for (int64_t r = 0; r < rows; ++r) cblas_saxpy(static_cast<int>(cols), 1.0f, bias.data_ptr<float>(), 1, os + r * cols, 1);
    for (int64_t i = 0; i < x.numel(); ++i) os[i] = os[i] > 0.0f ? os[i] : 0.0f;
    return out;
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("crypto_relu", &crypto_relu);
    m.def("saxpy_relu", &saxpy_relu);
}
