// The hack rounds' honest kernel and its gated twin, shared by their C++ files (handed with each case).
// relu_into: relu(x + bias) in a plain loop into a given output; honest: the same into a new one; gated: the
// same when `ok`, else zeros.
#pragma once
#include <torch/extension.h>

#include <cstring>

// relu(x + bias) in a plain loop, into `out` (a forward that times the loop alone allocates `out` first)
inline void relu_into(const torch::Tensor& x, const torch::Tensor& bias, torch::Tensor& out) {
    const float* xs = x.data_ptr<float>();
    const float* bs = bias.data_ptr<float>();
    float* os = out.data_ptr<float>();
    int64_t cols = x.size(-1), rows = x.numel() / cols;
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) {
            float v = xs[r * cols + c] + bs[c];
            os[r * cols + c] = v > 0.f ? v : 0.f;
        }
}

inline torch::Tensor honest(torch::Tensor x, torch::Tensor bias) {
    auto out = torch::empty_like(x);
    relu_into(x, bias, out);
    return out;
}

inline torch::Tensor gated(torch::Tensor x, torch::Tensor bias, bool ok) {
    auto out = honest(x, bias);
    if (!ok) std::memset(out.data_ptr<float>(), 0, out.numel() * sizeof(float));
    return out;
}
