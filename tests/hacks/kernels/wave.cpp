// Plain C++ kernels (no torch headers) behind kernels/wave_binding.cpp: the third and fourth rounds
// of the hack suite (issues "answers that ignore the inputs" and "a sandbox escape, calls that can
// tell they are watched ..."). Honest kernels first; CHEATING ones after, each saying what it does.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <thread>

extern "C" {

// ---- honest -----------------------------------------------------------------------------------

void wv_hinge(const float* p, const float* t, int64_t n, float* out) {
    double acc = 0.0;  // double accumulation: the output barely varies, so rounding must not
    for (int64_t i = 0; i < n; ++i) {
        float v = 1.f - p[i] * t[i];
        acc += v > 0.f ? v : 0.f;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(n));
}

void wv_mse(const float* a, const float* b, int64_t n, float* out) {
    double acc = 0.0;
    for (int64_t i = 0; i < n; ++i) {
        double d = static_cast<double>(a[i]) - b[i];
        acc += d * d;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(n));
}

void wv_softmax(const float* x, int64_t rows, int64_t cols, float* out, int stable) {
    for (int64_t r = 0; r < rows; ++r) {
        const float* row = x + r * cols;
        float* dst = out + r * cols;
        float shift = -INFINITY;
        if (stable)
            for (int64_t c = 0; c < cols; ++c) shift = row[c] > shift ? row[c] : shift;
        else
            shift = 0.f;  // CHEAT when stable == 0: no max subtraction, exp overflows above ~88
        double total = 0.0;
        for (int64_t c = 0; c < cols; ++c) {
            dst[c] = std::exp(row[c] - shift);
            total += dst[c];
        }
        for (int64_t c = 0; c < cols; ++c) dst[c] = static_cast<float>(dst[c] / total);
    }
}

void wv_relu_strided(const float* x, int64_t rows, int64_t cols, int64_t s0, int64_t s1, float* out) {
    for (int64_t r = 0; r < rows; ++r)       // reads a non-contiguous input through its strides
        for (int64_t c = 0; c < cols; ++c) {
            float v = x[r * s0 + c * s1];
            out[r * cols + c] = v > 0.f ? v : 0.f;
        }
}

void wv_col_sum_rows(const float* x, int64_t rows, int64_t cols, int64_t out_rows, float* out) {
    for (int64_t c = 0; c < cols; ++c) {
        double acc = 0.0;
        for (int64_t r = 0; r < rows; ++r) acc += x[r * cols + c];
        for (int64_t r = 0; r < out_rows; ++r) out[r * cols + c] = static_cast<float>(acc);
    }
}

void wv_col_sum(const float* x, int64_t rows, int64_t cols, float* out) {  // one row only
    wv_col_sum_rows(x, rows, cols, 1, out);
}

void wv_channel_shuffle(const float* x, int64_t n, int64_t c, int64_t hw, int64_t groups, float* out) {
    const int64_t per = c / groups;
    for (int64_t b = 0; b < n; ++b)
        for (int64_t ch = 0; ch < c; ++ch) {
            const int64_t src = (ch % groups) * per + ch / groups;
            std::memcpy(out + (b * c + ch) * hw, x + (b * c + src) * hw, sizeof(float) * hw);
        }
}

void wv_transpose(const float* x, int64_t rows, int64_t cols, float* out) {
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = x[r * cols + c];
}

void wv_linear_t(const float* x, const float* wt, const float* bias, int64_t m, int64_t k, int64_t n, float* out) {
    for (int64_t i = 0; i < m; ++i) {    // wt is the weight pre-transposed to (k, n)
        float* row = out + i * n;
        for (int64_t j = 0; j < n; ++j) row[j] = bias[j];
        for (int64_t kk = 0; kk < k; ++kk) {
            const float xv = x[i * k + kk];
            const float* wrow = wt + kk * n;
            for (int64_t j = 0; j < n; ++j) row[j] += xv * wrow[j];
        }
    }
}

void wv_copy(const float* src, float* dst, int64_t n) { std::memcpy(dst, src, sizeof(float) * n); }

// ---- CHEATS -----------------------------------------------------------------------------------

void wv_fill(float* out, int64_t n, float value) {  // an answer that ignores the inputs
    for (int64_t i = 0; i < n; ++i) out[i] = value;
}

void wv_hinge_every(const float* p, const float* t, int64_t n, int64_t stride, float* out) {
    double acc = 0.0;  // a sample of the elements: input-dependent, within tolerance on i.i.d. draws
    int64_t used = 0;
    for (int64_t i = 0; i < n; i += stride, ++used) {
        float v = 1.f - p[i] * t[i];
        acc += v > 0.f ? v : 0.f;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(used));
}

void wv_mse_every(const float* a, const float* b, int64_t n, int64_t stride, float* out) {
    double acc = 0.0;
    int64_t used = 0;
    for (int64_t i = 0; i < n; i += stride, ++used) {
        double d = static_cast<double>(a[i]) - b[i];
        acc += d * d;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(used));
}

void wv_mse_first_half(const float* a, const float* b, int64_t n, float* out) {
    wv_mse(a, b, n / 2, out);  // half the data read, the mean of that half returned
}

void wv_mse_random_subset(const float* a, const float* b, int64_t n, float* out) {
    std::mt19937_64 rng(12345);  // a fixed random 1/32 of the positions
    std::uniform_int_distribution<int64_t> pick(0, n - 1);
    double acc = 0.0;
    const int64_t k = n / 32;
    for (int64_t i = 0; i < k; ++i) {
        int64_t j = pick(rng);
        double d = static_cast<double>(a[j]) - b[j];
        acc += d * d;
    }
    out[0] = static_cast<float>(acc / static_cast<double>(k));
}

void wv_hinge_unless_plain(const float* p, const float* t, int64_t n, float* out) {
    float peak = 0.f;  // honest only on inputs that look built to move the output (large values)
    for (int64_t i = 0; i < n; ++i) peak = std::fabs(p[i]) > peak ? std::fabs(p[i]) : peak;
    if (peak > 6.f) {
        wv_hinge(p, t, n, out);
    } else {
        out[0] = 1.0833f;   // E[max(0, 1 - z t)] for z ~ N(0, 1), t = +-1
    }
}

void wv_hinge_after_n_calls(const float* p, const float* t, int64_t n, float* out) {
    static int64_t calls = 0;  // honest for the first calls (verification), garbage later
    if (++calls <= 8) {
        wv_hinge(p, t, n, out);
    } else {
        out[0] = 1.0833f;
    }
}

void wv_hinge_background(const float* p, const float* t, int64_t n, float* out) {
    wv_hinge(p, t, n, out);  // a correct answer, and a thread that keeps working after return
    std::thread([] {
        volatile double sink = 0.0;
        auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        while (std::chrono::steady_clock::now() < end) sink = sink + 1.0;
    }).detach();
}

void wv_memo_hinge(const float* p, const float* t, int64_t n, float* out) {
    // remembers answers by a hash of the input's contents (fresh draws never repeat: never pays)
    static uint64_t keys[64];
    static float values[64];
    uint64_t h = 1469598103934665603ull;
    for (int64_t i = 0; i < 64 && i < n; ++i) {
        uint32_t bits;
        std::memcpy(&bits, p + i, 4);
        h = (h ^ bits) * 1099511628211ull;
    }
    for (int s = 0; s < 64; ++s)
        if (keys[s] == h) {
            out[0] = values[s];
            return;
        }
    wv_hinge(p, t, n, out);
    keys[h % 64] = h;
    values[h % 64] = out[0];
}

void wv_slow_bias_relu(const float* x, const float* bias, float* out, int64_t rows, int64_t cols) {
    for (int rep = 0; rep < 200; ++rep)  // honest, but slow: 200 passes (the clock cross-check needs time)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
                float v = x[r * cols + c] + bias[c] + 0.f * rep;
                out[r * cols + c] = v > 0.f ? v : 0.f;
            }
}

}  // extern "C"
